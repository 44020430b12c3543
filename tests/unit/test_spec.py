"""backend.config.spec: every validation rule has a test that fails if the rule is removed."""
from __future__ import annotations

from pathlib import Path

import pytest

from backend.errors import SpecError, SpecErrors
from backend.config.spec import (ClusterSpec, JobKind, JobSpec, RestartMode, RestartPolicy, Role, TaskSpec,
                          TransportKind, cluster_from_dict, cluster_to_dict, default_cluster, default_job,
                          import_hostfile, import_ssh_config, job_from_dict, job_to_dict, load_cluster,
                          load_job, save_cluster, save_job)

HOSTILE = ["$(touch /tmp/pwned)", "a; rm -rf /", "`id`", "a b", "host'", 'host"', "a\nb", "a|b",
           "a&b", "a>b", "-oProxyCommand=x", "", " ", "a\0b", "ho$t", "fe80::1%$(id)", "host:22"]


def task(**over) -> dict:
    data = {"role": "worker", "host": "node1", "tf_port": 2222}
    data.update(over)
    return data


def errors_of(data: dict) -> list[SpecError]:
    with pytest.raises(SpecErrors) as info:
        cluster_from_dict(data)
    return info.value.errors


def bad(field: str, value: object) -> SpecError:
    """The single error for tasks[0].<field> set to ``value``."""
    errs = errors_of({"tasks": [task(**{field: value})]})
    assert [e.field for e in errs] == [f"tasks[0].{field}"], [str(e) for e in errs]
    return errs[0]


def good(field: str, value: object) -> TaskSpec:
    return cluster_from_dict({"tasks": [task(**{field: value})]}).tasks[0]


# ---- clusters ---------------------------------------------------------------------------------

def test_minimal_task_defaults():
    t = cluster_from_dict({"tasks": [task()]}).tasks[0]
    assert t == TaskSpec(Role.WORKER, "node1", 2222)
    assert (t.transport, t.ssh_port, t.python, t.workdir, t.gpus) == (TransportKind.SSH, None, "python3",
                                                                       "tfconsole", ())
    assert t.endpoint == "node1:2222"


def test_ipv6_address_is_bracketed_and_brackets_normalised():
    assert good("host", "[::1]").host == "::1"
    assert good("host", "fe80::1").endpoint == "[fe80::1]:2222"


def test_every_problem_is_reported_at_once():
    errs = errors_of({"tasks": [task(role="boss", tf_port=80), task(host="a b", user="1x")]})
    assert {e.field for e in errs} == {"tasks[0].role", "tasks[0].tf_port", "tasks[1].host", "tasks[1].user"}


def test_unknown_role_lists_allowed():
    assert "chief, worker, evaluator" in str(bad("role", "master"))


@pytest.mark.parametrize("host", HOSTILE)
def test_hostile_hosts_rejected(host):
    err = bad("host", host)
    assert "host" in err.field


def test_host_message_says_what_is_allowed():
    assert "letters, digits" in str(bad("host", "$(touch /tmp/pwned)"))


@pytest.mark.parametrize("host,kept", [("node-1.example.com", "node-1.example.com"), ("10.0.0.5", "10.0.0.5"),
                                       ("my_alias", "my_alias"), ("::1", "::1"), ("[2001:db8::2]", "2001:db8::2")])
def test_fine_hosts_accepted(host, kept):
    assert good("host", host).host == kept   # accepted, and kept as written (IPv6 without brackets)


@pytest.mark.parametrize("value", [1023, 0, 65536, -1, True, "22; ls", 22.5, "abc", [1]])
def test_bad_tf_port(value):
    bad("tf_port", value)


@pytest.mark.parametrize("value", [0, 65536, False, "22; ls", "2 2"])
def test_bad_ssh_port(value):
    bad("ssh_port", value)


def test_ports_accept_digit_strings_and_integral_floats():
    assert good("tf_port", "2345").tf_port == 2345
    assert good("ssh_port", 22.0).ssh_port == 22
    assert good("ssh_port", 1).ssh_port == 1


def test_missing_required_fields():
    errs = errors_of({"tasks": [{"role": "chief"}]})
    assert {e.field for e in errs} == {"tasks[0].host", "tasks[0].tf_port"}


@pytest.mark.parametrize("value", ["root;", "a b", "-oops", "$USER", "x" * 40, "1abc", 5])
def test_bad_user(value):
    bad("user", value)


def test_good_user_and_empty_means_none():
    assert good("user", "deploy_user-1").user == "deploy_user-1"
    assert good("user", "").user is None


@pytest.mark.parametrize("value", ["python3 -c x", "py;thon", "$(which python)", "'python'", "-c",
                                   "py\nthon", "py`x`"])
def test_bad_python(value):
    bad("python", value)


def test_good_python():
    assert good("python", "/opt/venv/bin/python3.11").python == "/opt/venv/bin/python3.11"
    assert good("python", None).python == "python3"


@pytest.mark.parametrize("value", ["../x", "a/../../etc", "a\nb", "a\0b", "~root/x"])
def test_bad_workdir(value):
    bad("workdir", value)


def test_workdir_tilde_normalised():
    assert good("workdir", "~/runs/tf").workdir == "runs/tf"
    assert good("workdir", "~").workdir == "."
    assert good("workdir", "/data/tf").workdir == "/data/tf"


@pytest.mark.parametrize("value, expected", [([0, 1], (0, 1)), ("0, 2", (0, 2)), ("", ()), (None, ()),
                                             ([], ()), (3, (3,))])
def test_gpus_forms(value, expected):
    assert good("gpus", value).gpus == expected


@pytest.mark.parametrize("value", [[-1], [0, 0], "0,,1", "a", [True], [1.5], "0;1", {"a": 1}])
def test_bad_gpus(value):
    bad("gpus", value)


@pytest.mark.parametrize("value", ["bastion", "me@bastion", "me@bastion:2200", "[::1]:22", "10.0.0.1"])
def test_good_jump_host(value):
    assert good("jump_host", value).jump_host == value


@pytest.mark.parametrize("value", ["me@", "a b", "bastion:x", "bastion:0", "::1:22", "[::1", "x;y@h",
                                   "h:22:33", "$(id)@h", "-J"])
def test_bad_jump_host(value):
    bad("jump_host", value)


def test_identity_file_plain_path_not_expanded():
    assert good("identity_file", "~/.ssh/id_ed25519").identity_file == "~/.ssh/id_ed25519"
    for value in ["a\nb", "-oX", 3]:
        bad("identity_file", value)


def test_transport():
    assert good("transport", "LOCAL").transport is TransportKind.LOCAL
    bad("transport", "telnet")


def test_unknown_key_named_with_allowed_ones():
    err = bad("prot", 1)
    assert "prot" in str(err) and "tf_port" in err.fix
    with pytest.raises(SpecErrors, match="extra"):
        cluster_from_dict({"tasks": [task()], "extra": 1})


@pytest.mark.parametrize("data", [None, [], "tasks", {"tasks": []}, {"tasks": "x"}, {"tasks": [3]},
                                  {"tasks": [None]}, {}])
def test_bad_cluster_shapes(data):
    with pytest.raises(SpecErrors):
        cluster_from_dict(data)


def test_taskspec_validates_when_built_in_code():
    with pytest.raises(SpecErrors) as info:
        TaskSpec(Role.WORKER, "$(id)", 80)
    assert {e.field for e in info.value.errors} == {"host", "tf_port"}
    assert TaskSpec("chief", "h", 2000, gpus=[1]).gpus == (1,)  # normalised
    with pytest.raises(SpecError):
        ClusterSpec(("not a task",))


def test_indexed_and_names():
    c = cluster_from_dict({"tasks": [task(role="chief"), task(tf_port=2223), task(role="evaluator", tf_port=2224),
                                     task(tf_port=2225)]})
    assert c.task_names() == ["chief-0", "worker-0", "evaluator-0", "worker-1"]
    assert [i for _, i in c.indexed()] == [0, 0, 0, 1]


def test_cluster_round_trip_dict_and_yaml(tmp_path):
    c = cluster_from_dict({"tasks": [
        task(role="chief", transport="local", host="127.0.0.1"),
        task(ssh_port=2200, user="me", identity_file="~/.ssh/k", jump_host="me@b:22", python="/x/python",
             workdir="~/w", gpus="0,1", tf_port=3000)]})
    assert cluster_from_dict(cluster_to_dict(c)) == c
    assert cluster_to_dict(c)["tasks"][0] == {"role": "chief", "host": "127.0.0.1", "tf_port": 2222,
                                              "transport": "local"}
    path = tmp_path / "cluster.yaml"
    save_cluster(c, path)
    assert load_cluster(path) == c
    assert not list(tmp_path.glob(".*tmp"))


def test_load_cluster_wraps_file_and_yaml_errors(tmp_path):
    with pytest.raises(SpecError, match="cannot read") as info:
        load_cluster(tmp_path / "missing.yaml")
    assert info.value.field == "file"
    broken = tmp_path / "broken.yaml"
    broken.write_text("tasks: [\n  - role: chief\n")
    with pytest.raises(SpecError, match="not valid YAML"):
        load_cluster(broken)
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"\xff\xfe\x00tasks")
    with pytest.raises(SpecError):
        load_cluster(binary)
    with pytest.raises(SpecError):
        load_cluster(tmp_path)  # a folder


def test_yaml_with_python_tags_is_refused(tmp_path):
    path = tmp_path / "evil.yaml"
    path.write_text("tasks: !!python/object/apply:os.system ['touch /tmp/pwned']\n")
    with pytest.raises(SpecError, match="YAML"):
        load_cluster(path)


def test_default_cluster():
    c = default_cluster("/usr/bin/python3")
    assert [t.role for t in c.tasks] == [Role.WORKER, Role.WORKER]
    assert {t.transport for t in c.tasks} == {TransportKind.LOCAL}
    assert [t.endpoint for t in c.tasks] == ["127.0.0.1:23456", "127.0.0.1:23457"]
    assert c.tasks[0].python == "/usr/bin/python3"


# ---- hostfile and ssh_config ------------------------------------------------------------------

def test_import_hostfile():
    c = import_hostfile("# cluster\nnode1 slots=2\n\nnode2   # one slot\nnode1 slots=1\n", tf_port=5000)
    assert [(t.role, t.endpoint) for t in c.tasks] == [
        (Role.CHIEF, "node1:5000"), (Role.WORKER, "node1:5001"), (Role.WORKER, "node2:5000"),
        (Role.WORKER, "node1:5002")]
    assert {t.transport for t in c.tasks} == {TransportKind.SSH}


def test_import_hostfile_options_pass_through():
    t = import_hostfile("h slots=1", python="/venv/bin/python", workdir="~/w").tasks[0]
    assert (t.python, t.workdir) == ("/venv/bin/python", "w")


@pytest.mark.parametrize("text, line", [("ok\nbad;host slots=1", "line 2"), ("a slots=x", "line 1"),
                                        ("a slots=0", "line 1"), ("a\n\nb gpus=2", "line 3"),
                                        ("a slots=2 extra", "line 1")])
def test_import_hostfile_bad_line_named(text, line):
    with pytest.raises(SpecError) as info:
        import_hostfile(text)
    assert info.value.field == line


def test_import_hostfile_several_bad_lines_and_empty():
    with pytest.raises(SpecErrors) as info:
        import_hostfile("$(x)\n`y`\n")
    assert [e.field for e in info.value.errors] == ["line 1", "line 2"]
    with pytest.raises(SpecError, match="no hosts"):
        import_hostfile("# nothing\n\n")
    with pytest.raises(SpecError, match="65536"):
        import_hostfile("a slots=2", tf_port=65535)


def test_import_ssh_config(tmp_path):
    cfg = tmp_path / "config"
    cfg.write_text("Host *\n  User me\nHost gpu1 gpu2 *.corp !bad\n  HostName 10.0.0.1\n"
                   "host=bastion\n# Host commented\nHost gpu1 we?rd 'quoted'\nMatch host x\nHost $(id)\n")
    assert import_ssh_config(cfg) == ["gpu1", "gpu2", "bastion", "quoted"]
    assert import_ssh_config(tmp_path / "none") == []
    with pytest.raises(SpecError):
        import_ssh_config(tmp_path)


# ---- jobs -------------------------------------------------------------------------------------

@pytest.fixture
def module(tmp_path) -> Path:
    path = tmp_path / "job.py"
    path.write_text('DEFAULTS = {"lr": 0.01, "name": "", "ok": False}\n\ndef build(): pass\n')
    return path


def job_errors(data: dict, **kw) -> set[str]:
    with pytest.raises(SpecErrors) as info:
        job_from_dict(data, **kw)
    return {e.field for e in info.value.errors}


def test_harness_job_relative_module_resolves_against_base_dir(module):
    job = job_from_dict({"kind": "harness", "module": "job.py", "params": {"epochs": 2, "lr": 0.1}},
                        base_dir=module.parent)
    assert job.module == str(module) and job.kind is JobKind.HARNESS
    assert job.params == {"epochs": 2, "lr": 0.1}


def test_harness_module_must_exist_and_be_py(module):
    assert job_errors({"kind": "harness", "module": "nope.py"}, base_dir=module.parent) == {"module"}
    assert job_errors({"kind": "harness", "module": "job.txt"}, base_dir=module.parent) == {"module"}
    assert job_errors({"kind": "harness"}) == {"module"}


def test_command_job(module):
    job = job_from_dict({"kind": "command", "command": "train.py --lr '0.1'", "env": {"OMP_NUM_THREADS": 4}})
    assert job.command == ("train.py", "--lr", "0.1") and job.env == {"OMP_NUM_THREADS": "4"}
    assert job_errors({"kind": "command"}) == {"command"}
    assert job_errors({"kind": "command", "command": []}) == {"command"}
    assert job_errors({"kind": "command", "command": ["x"], "module": str(module)}) == {"module"}
    assert job_errors({"kind": "command", "command": "a 'unclosed"}) == {"command"}


def test_job_kind_and_unknown_keys():
    assert job_errors({"kind": "script", "command": ["x"]}) == {"kind"}
    assert job_errors({"command": ["x"]}) == {"kind"}
    assert job_errors({"kind": "command", "command": ["x"], "cmd": 1}) == {"cmd"}
    with pytest.raises(SpecErrors):
        job_from_dict(["kind", "command"])


@pytest.mark.parametrize("params, field", [({"1bad": 1}, "params.1bad"), ({"a-b": 1}, "params.a-b"),
                                           ({"x": [1]}, "params.x"), ({"x": None}, "params.x"),
                                           ({"epochs": "three"}, "params.epochs"), ({"epochs": 0}, "params.epochs"),
                                           ({"steps_per_epoch": True}, "params.steps_per_epoch"),
                                           ({"lr": float("nan")}, "params.lr"), ({3: 1}, "params")])
def test_bad_params(params, field):
    assert job_errors({"kind": "command", "command": ["x"], "params": params}) == {field}


@pytest.mark.parametrize("env, field", [({"A B": "1"}, "env.A B"), ({"1A": "1"}, "env.1A"),
                                        ({"A": True}, "env.A"), ({"A": None}, "env.A"),
                                        ({"TF_CONFIG": "{}"}, "env.TF_CONFIG"), ({"A": "x\0"}, "env.A"),
                                        ("A=1", "env")])
def test_bad_env(env, field):
    assert job_errors({"kind": "command", "command": ["x"], "env": env}) == {field}


@pytest.mark.parametrize("restart, field", [({"max_restarts": -1}, "restart.max_restarts"),
                                            ({"backoff_s": -0.5}, "restart.backoff_s"),
                                            ({"stall_timeout_s": float("inf")}, "restart.stall_timeout_s"),
                                            ({"max_restarts": True}, "restart.max_restarts"),
                                            ({"mode": "always"}, "restart.mode"),
                                            ({"retries": 1}, "restart.retries"), ("on_failure", "restart")])
def test_bad_restart(restart, field):
    assert job_errors({"kind": "command", "command": ["x"], "restart": restart}) == {field}


def test_restart_policy_parsed_and_validated_in_code():
    job = job_from_dict({"kind": "command", "command": ["x"], "restart": {"mode": "on_failure", "backoff_s": 1}})
    assert job.restart == RestartPolicy(RestartMode.ON_FAILURE, 3, 1.0, 300.0)
    with pytest.raises(SpecErrors):
        RestartPolicy(max_restarts=-1)
    with pytest.raises(SpecErrors):
        JobSpec(JobKind.COMMAND)


def test_job_round_trip(tmp_path, module):
    job = job_from_dict({"kind": "harness", "module": str(module), "params": {"epochs": 1, "name": "x", "ok": True},
                         "env": {"A": "1"}, "restart": {"mode": "on_failure", "max_restarts": 5}})
    assert job_from_dict(job_to_dict(job)) == job
    path = tmp_path / "job.yaml"
    save_job(job, path)
    assert "module: job.py" in path.read_text()  # kept relative beside the job file
    assert load_job(path) == job
    cmd = JobSpec(JobKind.COMMAND, command=("a.py", "1"))
    assert job_to_dict(cmd) == {"kind": "command", "command": ["a.py", "1"]}
    assert job_from_dict(job_to_dict(cmd)) == cmd


def test_default_job(tmp_path):
    job = default_job(tmp_path)
    assert job.kind is JobKind.HARNESS and job.module == str(tmp_path / "synthetic.py")
    assert job.params == {"epochs": 3, "steps_per_epoch": 100}



@pytest.mark.parametrize("value", ["-cimport os;os.system('id > /tmp/x')#", "-x", "my runs", "runs\tx", "a\x1bb",
                                   "~/-c"])
def test_workdir_that_could_be_an_option_or_split_is_refused(value):
    """Issue 27: a leading '-' made the run folder a Python option (code ran on the host);
    whitespace split the Slurm #SBATCH --output line."""
    err = bad("workdir", value)
    assert str(err).startswith("tasks[0].workdir: ") and "Use a folder path" in str(err), str(err)


def test_slurm_workdir_is_checked_the_same_way():
    from backend.config.slurm_spec import slurm_from_dict
    with pytest.raises(SpecErrors) as err:
        slurm_from_dict({"kind": "slurm", "host": "login1", "workdir": "shared runs"})
    assert [e.field for e in err.value.errors] == ["workdir"]
    assert "whitespace" in str(err.value), str(err.value)


def test_a_misspelt_harness_param_is_refused_with_the_closest_name(module):
    """`steps_per_epcoh: 20` launched with the default 100 steps, silently (issue 35)."""
    with pytest.raises(SpecErrors) as info:
        job_from_dict({"kind": "harness", "module": str(module), "params": {"steps_per_epcoh": 20, "lr": 0.1}})
    assert [e.field for e in info.value.errors] == ["params.steps_per_epcoh"]
    assert "unknown key 'steps_per_epcoh'. Did you mean 'steps_per_epoch'?" in str(info.value)
    assert "add the key to DEFAULTS in job.py" in str(info.value)
    with pytest.raises(SpecErrors, match="Did you mean 'lr'"):   # the module's own keys are known too
        job_from_dict({"kind": "harness", "module": str(module), "params": {"lrr": 0.1}})


def test_params_are_free_where_nothing_says_which_keys_are_read(tmp_path):
    """A command job reads its own params; a module whose DEFAULTS is built by code cannot be
    read without running it: neither is refused."""
    job = job_from_dict({"kind": "command", "command": ["x"], "params": {"steps_per_epcoh": 20}})
    assert job.params == {"steps_per_epcoh": 20}
    built = tmp_path / "built.py"
    built.write_text("BASE = {'a': 1}\nDEFAULTS = dict(BASE, width=3)\n")
    assert job_from_dict({"kind": "harness", "module": str(built), "params": {"width": 4}}).params == {"width": 4}
    grown = tmp_path / "grown.py"
    grown.write_text("DEFAULTS = {'a': 1}\nDEFAULTS['width'] = 3\n")
    assert job_from_dict({"kind": "harness", "module": str(grown), "params": {"width": 4}}).params == {"width": 4}
