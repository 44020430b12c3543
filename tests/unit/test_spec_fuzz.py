"""Hostile and random input to every loader: each either loads or raises SpecError/SpecErrors.

Anything else escaping (KeyError, TypeError, a yaml error) would crash a page or the CLI instead of
showing the user what to fix.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from backend.errors import SpecError, SpecErrors
from backend.config.spec import (ClusterSpec, JobSpec, cluster_from_dict, cluster_to_dict, import_hostfile,
                          job_from_dict, load_cluster)
from backend.config.tfconfig import all_tf_configs, check_cluster

FAST = settings(max_examples=100, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])

HOSTILE_TEXT = ["$(touch /tmp/pwned)", "; rm -rf ~", "`id`", "'", '"', "\n", "\0", "a b", "-oProxyCommand=sh",
                "..", "../../etc", "~root", "%s%n", "\u202e", "9" * 5000, "", "fe80::1%eth0;id", "[::1",
                "0x10", "1e400", "nan", "True", "slots=1"]
KEYS = ["role", "host", "tf_port", "transport", "ssh_port", "user", "identity_file", "jump_host", "python",
        "workdir", "gpus", "kind", "module", "command", "params", "env", "restart", "mode", "max_restarts",
        "backoff_s", "stall_timeout_s", "epochs", "tasks"]

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(min_value=-2, max_value=70000),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=30), st.sampled_from(HOSTILE_TEXT),
    st.sampled_from(["chief", "worker", "evaluator", "local", "ssh", "harness", "command", "on_failure",
                     "node1", "127.0.0.1", "::1", "0,1", "python3", "x.py"]),
    st.binary(max_size=8),
)
keys = st.one_of(st.sampled_from(KEYS), st.text(max_size=8), st.integers(), st.none(), st.booleans())
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.tuples(inner, inner),
                                                       st.dictionaries(keys, inner, max_size=5)),
                      max_leaves=20)
task_dicts = st.dictionaries(st.sampled_from(KEYS[:11]) | keys, values, max_size=8)
cluster_data = st.one_of(values, st.fixed_dictionaries({"tasks": st.lists(task_dicts, max_size=4)}),
                         st.fixed_dictionaries({"tasks": st.lists(task_dicts, max_size=3)},
                                               optional={"extra": values}))
job_data = st.one_of(values, st.dictionaries(st.sampled_from(KEYS[11:17]) | keys, values, max_size=6))


def loads_or_spec_error(fn, *args, **kw):
    try:
        return fn(*args, **kw)
    except (SpecError, SpecErrors):
        return None


@FAST
@given(cluster_data)
def test_cluster_from_dict_random(data):
    c = loads_or_spec_error(cluster_from_dict, data)
    if c is not None:
        assert isinstance(c, ClusterSpec)
        assert cluster_from_dict(cluster_to_dict(c)) == c  # whatever loads round-trips
        check_cluster(c)
        all_tf_configs(c)


@FAST
@given(job_data)
def test_job_from_dict_random(data):
    job = loads_or_spec_error(job_from_dict, data, base_dir=Path(tempfile.gettempdir()))
    assert job is None or isinstance(job, JobSpec)


yaml_text = st.one_of(
    st.text(max_size=200),
    st.lists(st.sampled_from(["tasks:", "- role: chief", "  host: $(id)", "  tf_port: 99999999999",
                              "  gpus: [0, 0]", "&a [*a]", "!!python/object/apply:os.system ['id']",
                              "!!binary AAAA", "? [1, 2]\n: 3", "{{{{", "- *x", "\t- bad", "key: !!set {a}",
                              "  host: node1", "  tf_port: 2000", "  - role: worker", "--- \n...",
                              "a: " + "[" * 200, "tf_port: 0x1F", "x: 2001-01-01", "  user: root;"]),
             max_size=8).map("\n".join),
)


@FAST
@given(yaml_text)
def test_load_cluster_random_yaml(text):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "c.yaml"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        c = loads_or_spec_error(load_cluster, path)
        assert c is None or isinstance(c, ClusterSpec)


hostfile_text = st.one_of(
    st.text(max_size=200),
    st.lists(st.one_of(st.sampled_from(["node1 slots=2", "# c", "", "node2", "a slots=x", "b slots=0",
                                        "c slots=99999", "$(id) slots=1", "d slots=1 max_slots=2", "::1 slots=1",
                                        "e\tslots=3 # note", "slots=2"]),
                       st.sampled_from(HOSTILE_TEXT)), max_size=10).map("\n".join),
    values,
)


@FAST
@given(hostfile_text, st.integers(min_value=-5, max_value=70000))
def test_import_hostfile_random(text, port):
    c = loads_or_spec_error(import_hostfile, text, tf_port=port)
    assert c is None or (isinstance(c, ClusterSpec) and c.tasks[0].role.value == "chief")


@pytest.mark.parametrize("text", HOSTILE_TEXT)
def test_hostile_strings_in_every_task_field(text):
    for key in KEYS[:11]:
        data = {"role": "worker", "host": "node1", "tf_port": 2000, key: text}
        c = loads_or_spec_error(cluster_from_dict, {"tasks": [data]})
        if c is not None:  # only harmless values may load, and they carry no shell characters
            task = c.tasks[0]
            for value in (task.host, task.python, task.user or ""):
                assert not set(value) & set("$`;|&<>'\" \n\0()")


@pytest.mark.parametrize("text", HOSTILE_TEXT)
def test_hostile_strings_in_every_job_field(text):
    for key in ("kind", "module", "command", "params", "env", "restart"):
        loads_or_spec_error(job_from_dict, {"kind": "command", "command": ["x"], key: text})
        loads_or_spec_error(job_from_dict, {"kind": "command", "command": ["x"], "params": {text: text}})
        loads_or_spec_error(job_from_dict, {"kind": "command", "command": ["x"], "env": {text: text}})


def test_recursive_and_huge_yaml(tmp_path):
    for text in ["a: &x [*x]\ntasks: &y [*y]", "[" * 5000 + "]" * 5000, "tasks:\n" + "- {}\n" * 2000,
                 "tasks: [{role: worker, host: h, tf_port: " + "9" * 5000 + "}]"]:
        path = tmp_path / "c.yaml"
        path.write_text(text)
        assert loads_or_spec_error(load_cluster, path) is None
