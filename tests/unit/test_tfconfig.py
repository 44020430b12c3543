"""backend.config.tfconfig: TF_CONFIG is a pure function of the spec; each check has a failing case."""
from __future__ import annotations

import json
import shlex

import pytest

from backend.errors import SpecError, SpecErrors
from backend.config.spec import ClusterSpec, Role, TaskSpec, TransportKind, cluster_from_dict, default_cluster
from backend.config.tfconfig import Finding, all_tf_configs, check_cluster, export_lines, require_valid, tf_config


def cluster(*tasks: tuple) -> ClusterSpec:
    """cluster(("chief", "h", 2000), ("worker", "h", 2001, {"transport": "local"}), ...)"""
    return cluster_from_dict({"tasks": [dict(role=t[0], host=t[1], tf_port=t[2], **(t[3] if len(t) > 3 else {}))
                                        for t in tasks]})


def levels(c: ClusterSpec, level: str) -> list[Finding]:
    return [f for f in check_cluster(c) if f.level == level]


MIXED = cluster(("chief", "a", 2000), ("worker", "b", 2001), ("evaluator", "c", 2002), ("worker", "d", 2003))


def test_tf_config_chief_worker_evaluator():
    cl = {"chief": ["a:2000"], "worker": ["b:2001", "d:2003"]}
    assert tf_config(MIXED, 0) == {"cluster": cl, "task": {"type": "chief", "index": 0}}
    assert tf_config(MIXED, 3) == {"cluster": cl, "task": {"type": "worker", "index": 1}}
    # Evaluators are not listed in "cluster" but know their own task.
    assert tf_config(MIXED, 2) == {"cluster": cl, "task": {"type": "evaluator", "index": 0}}


def test_tf_config_omits_empty_roles_and_brackets_ipv6():
    c = cluster(("worker", "::1", 2000), ("worker", "::1", 2001))
    assert tf_config(c, 1) == {"cluster": {"worker": ["[::1]:2000", "[::1]:2001"]},
                               "task": {"type": "worker", "index": 1}}


@pytest.mark.parametrize("pos", [-1, 4, True, "0", None])
def test_tf_config_bad_position(pos):
    with pytest.raises(SpecError):
        tf_config(MIXED, pos)


def test_all_tf_configs_and_export_lines():
    configs = all_tf_configs(MIXED)
    assert list(configs) == ["chief-0", "worker-0", "evaluator-0", "worker-1"]
    lines = export_lines(MIXED)
    for name, line in lines.items():
        words = shlex.split(line)
        assert words[0] == "export" and words[1].startswith("TF_CONFIG=")
        assert json.loads(words[1][len("TF_CONFIG="):]) == configs[name]
    assert lines["chief-0"].startswith("export TF_CONFIG='{")


def test_default_cluster_is_valid_with_worker_zero_as_chief():
    c = default_cluster("python3")
    assert levels(c, "error") == [] and levels(c, "warning") == []
    (info,) = levels(c, "info")
    assert "worker 0 (127.0.0.1:23456) acts as chief" in info.message
    require_valid(c)
    assert tf_config(c, 0) == {"cluster": {"worker": ["127.0.0.1:23456", "127.0.0.1:23457"]},
                               "task": {"type": "worker", "index": 0}}


def test_duplicate_address_names_both_tasks():
    c = cluster(("chief", "node1", 2000), ("worker", "NODE1", 2000))
    (err,) = levels(c, "error")
    assert err.field == "tasks[1].tf_port" and "chief-0" in err.message and "worker-0" in err.message
    assert err.message.endswith("own tf_port.")


def test_duplicate_ipv6_spellings_collide():
    assert levels(cluster(("worker", "::1", 2000), ("worker", "0:0::1", 2000)), "error")


def test_more_than_one_chief():
    errs = levels(cluster(("chief", "a", 2000), ("chief", "b", 2000)), "error")
    assert [e.field for e in errs] == ["tasks[1].role"]


def test_no_chief_and_no_worker():
    errs = levels(cluster(("evaluator", "a", 2000)), "error")
    assert [e.field for e in errs] == ["tasks"]


def test_loopback_mixed_with_remote_hosts():
    c = cluster(("chief", "localhost", 2000), ("worker", "10.0.0.2", 2000), ("worker", "127.0.0.5", 2001))
    errs = levels(c, "error")
    assert [e.field for e in errs] == ["tasks[0].host", "tasks[2].host"]
    assert "could not reach" in errs[0].message and "routable" not in errs[0].message.split(".")[0]
    assert "route" in errs[0].fix
    assert not levels(cluster(("chief", "127.0.0.2", 2000), ("worker", "127.0.0.3", 2000)), "error")


def test_local_tasks_on_same_port_collide_across_addresses():
    local = {"transport": "local"}
    c = cluster(("chief", "127.0.0.1", 2000, local), ("worker", "localhost", 2000, local))
    (err,) = levels(c, "error")
    assert "this machine" in err.message and err.field == "tasks[1].tf_port"
    ssh = cluster(("chief", "127.0.0.2", 2000), ("worker", "127.0.0.3", 2000))
    assert not levels(ssh, "error")  # separate sshd test hosts: distinct addresses


def test_ports_out_of_range_even_if_validation_was_bypassed():
    t = TaskSpec(Role.WORKER, "a", 2000, ssh_port=22)
    object.__setattr__(t, "tf_port", 70000)
    object.__setattr__(t, "ssh_port", 0)
    fields = {f.field for f in levels(ClusterSpec((t,)), "error")}
    assert fields == {"tasks[0].tf_port", "tasks[0].ssh_port"}


def test_warnings_for_shared_gpus_and_several_evaluators():
    c = cluster(("chief", "a", 2000, {"gpus": [0]}), ("worker", "a", 2001, {"gpus": "0,1"}),
                ("evaluator", "b", 2000), ("evaluator", "c", 2000))
    warns = levels(c, "warning")
    assert {w.field for w in warns} == {"tasks[1].gpus", "tasks[3].role"}
    assert not levels(c, "error")


def test_findings_sorted_errors_first():
    c = cluster(("worker", "a", 2000), ("worker", "a", 2000))
    assert [f.level for f in check_cluster(c)] == ["error", "info"]


def test_require_valid_raises_all_errors():
    c = cluster(("chief", "a", 2000), ("chief", "a", 2000), ("worker", "localhost", 2001))
    with pytest.raises(SpecErrors) as info:
        require_valid(c)
    assert {e.field for e in info.value.errors} == {"tasks[1].role", "tasks[1].tf_port", "tasks[2].host"}
    assert all(e.fix for e in info.value.errors)


def test_transport_kind_is_what_local_check_uses():
    c = cluster(("chief", "127.0.0.1", 2000, {"transport": "local"}),
                ("worker", "127.0.0.2", 2000, {"transport": "ssh"}))
    assert c.tasks[1].transport is TransportKind.SSH and not levels(c, "error")


@pytest.mark.parametrize("addresses, role, index, name, chief", [
    ({"chief": ["a:1"], "worker": ["b:1", "c:1"]}, "worker", 0, "worker-0", False),
    ({"chief": ["a:1"], "worker": ["b:1"]}, "chief", 0, "chief-0", True),
    ({"worker": ["b:1", "c:1"]}, "worker", 0, "worker-0", True),    # no chief entry: worker 0 is
    ({"worker": ["b:1", "c:1"]}, "worker", 1, "worker-1", False),
])
def test_the_one_reader_gives_back_the_place_the_builder_wrote(addresses, role, index, name, chief):
    """The harness and the client library read TF_CONFIG with one function; what build() wrote,
    place() reads back: the task's name, every listed task chief first, who is chief."""
    from backend.client.harness import tf_config_doc
    where = tf_config_doc.place(json.dumps(tf_config_doc.build(addresses, role, index)))
    listed = [f"{r}-{i}" for r in ("chief", "worker") for i in range(len(addresses.get(r, [])))]
    assert (where.task, list(where.tasks), where.is_chief) == (name, listed, chief)
    assert where.tasks[where.task_index] == name
