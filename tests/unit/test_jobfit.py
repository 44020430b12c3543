"""Job x cluster checks before anything starts, the validation gaps, and the start-up diagnosis."""
from __future__ import annotations

import pytest

from backend.diagnosis import diagnose
from backend.checkpoints import NAME
from backend.errors import SpecErrors
from backend.config.jobfit import check_job, module_defaults, replicas, require_valid
from backend.records.state import RUN_ID
from backend.config.spec import cluster_from_dict, job_from_dict


def workers(n: int, **extra) -> object:
    return cluster_from_dict({"tasks": [{"role": "worker", "host": f"n{i}", "tf_port": 2000, **extra}
                                        for i in range(n)]})


def job(tmp_path, params=None, module_text="def build_model(): pass\n"):
    module = tmp_path / "job.py"
    module.write_text(module_text)
    return job_from_dict({"kind": "harness", "module": str(module), "params": params or {}})


def test_default_batch_on_three_workers_is_refused_before_launch(tmp_path):
    found = check_job(workers(3), job(tmp_path))
    assert [f.field for f in found] == ["global_batch_size"]
    assert "64 is not divisible by the 3 replicas" in found[0].message
    assert "63 or 66" in found[0].message
    with pytest.raises(SpecErrors, match="global_batch_size"):
        require_valid(workers(3), job(tmp_path))
    require_valid(workers(2), job(tmp_path))   # 64 / 2 is fine


def test_the_batch_comes_from_params_then_module_defaults(tmp_path):
    assert check_job(workers(3), job(tmp_path, {"global_batch_size": 96})) == []
    assert check_job(workers(3), job(tmp_path, module_text="DEFAULTS = {'global_batch_size': 48}\n")) == []
    found = check_job(workers(3), job(tmp_path, {"global_batch_size": 50}))
    assert found[0].field == "params.global_batch_size"
    assert module_defaults(str(tmp_path / "missing.py")) == {}


def test_replicas_count_gpus():
    assert replicas(workers(2, gpus=[0, 1])) == 4
    assert replicas(cluster_from_dict({"tasks": [
        {"role": "chief", "host": "a", "tf_port": 2000}, {"role": "evaluator", "host": "b", "tf_port": 2000}]})) == 1


def test_a_slurm_job_whose_batch_does_not_split_over_its_tasks_is_refused_before_sbatch(tmp_path):
    from backend.runs import launcher
    from backend.runs.store import RunStore
    from backend.config.slurm_spec import slurm_from_dict
    three = slurm_from_dict({"kind": "slurm", "host": "login", "partition": "gpu", "nodes": 1, "tasks_per_node": 3})
    four_gpus = slurm_from_dict({"kind": "slurm", "host": "login", "partition": "gpu", "nodes": 2, "tasks_per_node": 1,
                                 "gpus_per_task": 2})
    assert (replicas(three), replicas(four_gpus)) == (3, 4)
    found = check_job(three, job(tmp_path))
    assert [f.field for f in found] == ["global_batch_size"] and "nodes x tasks_per_node" in found[0].message
    assert check_job(four_gpus, job(tmp_path)) == []
    store = RunStore(tmp_path / "runs")
    with pytest.raises(SpecErrors, match="64 is not divisible by the 3 replicas"):
        launcher.launch(three, job(tmp_path), store=store)   # refused here: no sbatch, no run folder
    assert store.list() == []


def test_command_jobs_are_not_checked(tmp_path):
    command = job_from_dict({"kind": "command", "command": ["train.py"]})
    assert check_job(workers(3), command) == []


def test_negative_keep_checkpoints_and_bad_startup_timeout_are_refused(tmp_path):
    with pytest.raises(SpecErrors, match="params.keep_checkpoints"):
        job(tmp_path, {"keep_checkpoints": -1})
    assert check_job(workers(2), job(tmp_path, {"keep_checkpoints": 0})) == []   # 0 keeps all
    found = check_job(workers(2), job(tmp_path, module_text="DEFAULTS = {'keep_checkpoints': -2}\n"))
    assert [f.field for f in found] == ["keep_checkpoints"]
    found = check_job(workers(2), job(tmp_path, module_text="DEFAULTS = {'startup_timeout_s': -1}\n"))
    assert [f.field for f in found] == ["startup_timeout_s"]


@pytest.mark.parametrize("params, field, says", [
    ({"startup_timeout_s": -1}, "params.startup_timeout_s", "seconds above 0"),
    ({"startup_timeout_s": 0}, "params.startup_timeout_s", "seconds above 0"),
    ({"checkpoint_grace_s": -5}, "params.checkpoint_grace_s", "seconds of 0 or more"),
    ({"collective_timeout_s": -1}, "params.collective_timeout_s", "seconds of 0 or more"),
    ({"collective_timeout_s": "1m"}, "params.collective_timeout_s", "seconds of 0 or more"),
    ({"checkpoint_grace_s": "soon"}, "params.checkpoint_grace_s", "seconds of 0 or more"),
    ({"checkpoint_grace_s": True}, "params.checkpoint_grace_s", "seconds of 0 or more"),
    ({"keep_best_checkpoints": -1}, "params.keep_best_checkpoints", "whole number of 0 or more"),
    ({"keep_best_checkpoints": 1.5}, "params.keep_best_checkpoints", "whole number of 0 or more"),
])
def test_retention_and_timeout_params_are_checked_as_typed(tmp_path, params, field, says):
    with pytest.raises(SpecErrors) as err:
        job(tmp_path, params)
    assert [e.field for e in err.value.errors] == [field] and says in str(err.value)


def test_retention_params_in_range_are_kept(tmp_path):
    params = {"checkpoint_grace_s": 0, "keep_best_checkpoints": 2, "startup_timeout_s": 2.5,
              "collective_timeout_s": 0}
    assert dict(job(tmp_path, params).params) == params


def test_python_with_tilde_is_refused_with_the_fix():
    with pytest.raises(SpecErrors) as err:
        cluster_from_dict({"tasks": [{"role": "worker", "host": "a", "tf_port": 2000, "python": "~/venv/bin/python"}]})
    assert err.value.errors[0].field == "tasks[0].python"
    assert "no shell expands" in str(err.value) and "venv/bin/python" in err.value.errors[0].fix


def test_ipv6_jump_host_is_accepted_in_brackets():
    c = cluster_from_dict({"tasks": [{"role": "worker", "host": "a", "tf_port": 2000,
                                      "jump_host": "alice@[2001:db8::1]:2222"}]})
    assert c.tasks[0].jump_host == "alice@[2001:db8::1]:2222"
    with pytest.raises(SpecErrors, match="without brackets"):
        cluster_from_dict({"tasks": [{"role": "worker", "host": "a", "tf_port": 2000,
                                      "jump_host": "alice@2001:db8::1:2222"}]})


def test_names_with_a_trailing_newline_are_refused():
    assert NAME.match("model") and not NAME.match("model\n")
    assert RUN_ID.match("run-1") and not RUN_ID.match("run-1\n")


STARTUP_LOG = ("[worker-0] start-up 3 s: waiting for worker-1 at nohost.invalid:24001: name does not resolve "
               "on this host (Name or service not known)\n"
               "[worker-0] HARNESS FAILED: cluster start-up failed after 5 s (startup_timeout_s): waiting "
               "for worker-1 at nohost.invalid:24001: name does not resolve on this host (Name or service not known)\n")


def test_startup_diagnosis_names_the_peer_and_is_permanent():
    text = diagnose.diagnose(STARTUP_LOG)
    assert text.startswith(diagnose.STARTUP_UNREACHABLE)
    assert "worker-1 at nohost.invalid:24001" in text and "address" in text
    assert diagnose.permanent(f"worker-0 exited(1): {text[:300]}")


def test_a_peer_that_did_not_answer_may_be_restarted():
    log = STARTUP_LOG.replace("name does not resolve on this host (Name or service not known)",
                              "connection refused (not started yet, or nothing listens there)")
    text = diagnose.diagnose(log)
    assert text.startswith(diagnose.STARTUP_TIMEOUT) and "worker-1" in text
    assert not diagnose.permanent(f"worker-0 exited(1): {text[:300]}")


def test_tensorflow_failing_to_resolve_a_peer_is_the_same_diagnosis():
    log = ("tensorflow.python.framework.errors_impl.UnavailableError: Graph execution error:\n"
           "Collective ops is aborted by: errors resolving nohost.localhost:38447: [field:hostname lookup "
           "error:Address lookup failed for nohost.localhost:38447 os_error: Name or service not known "
           "syscall: getaddrinfo]\n[worker-0] HARNESS FAILED: UnavailableError: a peer worker died\n")
    text = diagnose.diagnose(log)
    assert text.startswith(diagnose.STARTUP_UNREACHABLE) and "nohost.localhost:38447" in text
    assert diagnose.permanent(text)


def test_the_harness_own_startup_error_line_is_read_too():
    log = ("[worker-0] HARNESS FAILED: StartupError: cluster start-up failed after 5 s (startup_timeout_s): "
           "waiting for worker-2 at nohost.localhost:2000: name does not resolve on this host (x)\n")
    assert diagnose.diagnose(log).startswith(diagnose.STARTUP_UNREACHABLE)
