"""The Slurm kind's pure parts: the spec's validation, the batch script, Slurm's output read back,
and a task's place from its step's SLURM_* variables."""
from __future__ import annotations

import pytest

from backend.errors import SpecErrors
from backend.client.harness import slurm_env
from backend.records.outcome import TaskPhase, Verdict, conclude
from backend.engines.slurm_script import batch_script
from backend.config.kinds import any_cluster_from_dict
from backend.config.slurm_spec import SlurmSpec, slurm_from_dict, slurm_to_dict
from backend.engines.slurm_states import SlurmPhase, parse_scontrol, parse_squeue, task_statuses
from backend.config.spec import ClusterSpec, JobKind, JobSpec

BASE = {"kind": "slurm", "host": "login1"}


def errors_of(**fields) -> dict[str, str]:
    with pytest.raises(SpecErrors) as info:
        slurm_from_dict({**BASE, **fields})
    return {e.field: str(e) for e in info.value.errors}


def test_a_slurm_file_round_trips_and_shows_its_tasks_through_the_login_host():
    spec = slurm_from_dict({**BASE, "partition": "gpu", "nodes": 2, "tasks_per_node": 2,
                            "gpus_per_task": 1, "extra": {"mem": "16G", "exclusive": True}})
    assert slurm_from_dict(slurm_to_dict(spec)) == spec
    assert isinstance(any_cluster_from_dict(slurm_to_dict(spec)), SlurmSpec)
    assert isinstance(any_cluster_from_dict({"tasks": [{"role": "worker", "host": "a", "tf_port": 2000}]}),
                      ClusterSpec)
    view = spec.as_cluster()
    assert view.task_names() == ["chief-0", "worker-0", "worker-1", "worker-2"]
    assert {t.host for t in view.tasks} == {"login1"}


@pytest.mark.parametrize("field,value,fix", [
    ("partition", "gpu;rm -rf", "sinfo"),
    ("nodes", 0, "1, 2, 3"),
    ("tasks_per_node", "two", "1, 2, 3"),
    ("gpus_per_task", -1, "CPU only"),
    ("time_limit", "soon", "HH:MM:SS"),
    ("time_limit", "0:00", "HH:MM:SS"),
    ("account", "a b", "sacctmgr"),
    ("extra.output", "x", "Use only these sbatch options"),
    ("extra.mem", "16 G\n#SBATCH --x", "no spaces"),
    ("extra.exclusive", "yes", "exclusive: true"),
    ("host", "a;b", "hostname"),
])
def test_a_bad_field_is_named_with_its_fix(field, value, fix):
    top, _, sub = field.partition(".")
    found = errors_of(**{top: {sub: value} if sub else value})
    assert field in found and fix in found[field], found


def test_the_batch_script_starts_one_task_per_worker_with_srun():
    spec = slurm_from_dict({**BASE, "partition": "debug", "nodes": 2, "tasks_per_node": 2,
                            "account": "ml", "qos": "high", "time_limit": "04:00:00", "extra": {"mem": "8G"},
                            "python": "/opt/venv/bin/python", "tf_port": 30000})
    job = JobSpec(kind=JobKind.HARNESS, module="/x/synthetic.py", params={"epochs": 2},
                  env={"SECRET_NAME": "a b'c"})
    text = batch_script(spec, job, run_dir="tf/runs/r1.abc", run_id="r1", attempt=2, resume_step=40)
    for line in ("#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=2", "#SBATCH --partition=debug",
                 "#SBATCH --account=ml", "#SBATCH --qos=high", "#SBATCH --time=04:00:00",
                 "#SBATCH --mem=8G", "#SBATCH --requeue", "export CUDA_VISIBLE_DEVICES=''",
                 "export SECRET_NAME='a b'\"'\"'c'", "export TFCONSOLE_ATTEMPT=2"):
        assert line in text.splitlines(), line
    srun = text[text.index("\nsrun "):]
    assert "--output=tf/runs/r1.abc/logs/slurm-task-%t.log" in srun
    assert "-S tf/runs/r1.abc/lib slurm_task run --run-dir tf/runs/r1.abc --tf-port 30000 --" in srun
    assert "tf/runs/r1.abc/lib train --run-dir tf/runs/r1.abc" in srun and "--resume-step 40" in srun
    gpu = batch_script(slurm_from_dict({**BASE, "gpus_per_task": 1}), job, run_dir="r", run_id="r1",
                       attempt=1, resume_step=None)
    assert "#SBATCH --gpus-per-task=1" in gpu and "CUDA_VISIBLE_DEVICES" not in gpu


def test_a_task_builds_its_tf_config_from_its_step_variables():
    env = {"SLURM_PROCID": "3", "SLURM_STEP_NODELIST": "gpu[01-02],big7",
           "SLURM_STEP_TASKS_PER_NODE": "2(x2),1", "SLURM_STEP_NUM_TASKS": "5"}
    name, config = slurm_env.tf_config_for(env, 23456)
    assert name == "worker-2"
    assert config == {"cluster": {"chief": ["gpu01:23456"],
                                  "worker": ["gpu01:23457", "gpu02:23456", "gpu02:23457", "big7:23456"]},
                      "task": {"type": "worker", "index": 2}}
    assert slurm_env.tf_config_for({**env, "SLURM_PROCID": "0"}, 23456)[1]["task"] == {"type": "chief", "index": 0}


SCONTROL = ("JobId=41 JobName=tfconsole-r1 UserId=ann(1000) Priority=1 Account=(null) QOS=normal "
            "JobState={state} Reason={reason} Dependency=(null) Requeue=0 Restarts=0 BatchFlag=1 "
            "ExitCode={code} RunTime=00:00:31 TimeLimit=00:00:30 Command=/home/ann/my runs/a.sbatch "
            "WorkDir=/home/ann NodeList={nodes} NumNodes=1 NumTasks=2\n")


def job(state, reason="None", code="0:0", nodes="vm"):
    return parse_scontrol(SCONTROL.format(state=state, reason=reason, code=code, nodes=nodes))


def test_scontrol_and_squeue_lines_are_read():
    info = job("PENDING", "Resources", nodes="(null)")
    assert (info.job_id, info.phase, info.reason, info.nodes) == ("41", SlurmPhase.PENDING, "Resources", "")
    assert info.label == "pending (Resources)"
    assert job("CANCELLED", code="0:15").signal == 15
    assert parse_scontrol("slurm_load_jobs error: Invalid job id specified\n") is None
    queued = parse_squeue("41|PENDING|Priority|(null)|10:00\n")
    assert (queued.phase, queued.reason) == (SlurmPhase.PENDING, "Priority")
    assert parse_squeue("") is None


@pytest.mark.parametrize("state,phase", [
    ("PENDING", SlurmPhase.PENDING), ("RUNNING", SlurmPhase.RUNNING), ("COMPLETING", SlurmPhase.COMPLETING),
    ("COMPLETED", SlurmPhase.COMPLETED), ("FAILED", SlurmPhase.FAILED), ("CANCELLED", SlurmPhase.CANCELLED),
    ("TIMEOUT", SlurmPhase.TIMEOUT), ("NODE_FAIL", SlurmPhase.NODE_FAIL), ("OUT_OF_MEMORY", SlurmPhase.OUT_OF_MEMORY),
])
def test_each_slurm_state_maps_to_a_phase(state, phase):
    assert job(state).phase == phase


NAMES = ["chief-0", "worker-0"]


def test_task_statuses_follow_the_job_and_the_tasks_own_exit_codes():
    running = {"chief-0": {"info": {"node": "vm"}, "exit": None}, "worker-0": {"info": None, "exit": None}}
    pending = task_statuses(job("PENDING", "Resources"), {}, NAMES)
    assert [s.state for s in pending] == [TaskPhase.QUEUED] * 2 and "Resources" in pending[0].diagnosis
    assert conclude(pending).verdict == Verdict.GOING
    live = task_statuses(job("RUNNING"), running, NAMES)
    assert [s.state for s in live] == [TaskPhase.RUNNING, TaskPhase.STARTING]
    # A task killed by a time limit writes its code before Slurm says TIMEOUT: wait for Slurm.
    ending = task_statuses(job("COMPLETING", "TimeLimit"), {n: {"info": {}, "exit": -15} for n in NAMES}, NAMES)
    assert conclude(ending).verdict == Verdict.GOING
    done = {n: {"info": {"node": "vm"}, "exit": 0} for n in NAMES}
    assert conclude(task_statuses(job("COMPLETED"), done, NAMES)).verdict == Verdict.FINISHED
    timeout = task_statuses(job("TIMEOUT", "TimeLimit", "0:15"), running, NAMES)
    found = conclude(timeout)
    assert found.verdict == Verdict.FAILED and "timeout" in found.reason and "time_limit" in found.reason
    killed = {"chief-0": {"info": {"node": "vm"}, "exit": -9}, "worker-0": {"info": {}, "exit": None}}
    failed = task_statuses(job("FAILED", "NonZeroExitCode", "137:0"), killed, NAMES)
    assert [(s.state, s.exit_code) for s in failed] == [(TaskPhase.EXITED, -9), (TaskPhase.EXITED, 137)]
    killed = {"chief-0": {"info": {}, "exit": None}, "worker-0": {"info": {}, "exit": -9}}
    assert conclude(task_statuses(job("FAILED", "NonZeroExitCode", "137:0"), killed, NAMES)).reason \
        .startswith("worker-0 exited(-9)")   # the task that failed first, not srun's casualty
    forgotten = task_statuses(None, {"chief-0": {"exit": 0}}, NAMES)
    assert [s.state for s in forgotten] == [TaskPhase.EXITED, TaskPhase.LOST]


@pytest.mark.parametrize("value,fix", [("shared runs", "no spaces"), ("-crm", "not starting with '-'"),
                                       ("runs%j", "#SBATCH lines cannot carry"),
                                       ("it's", "#SBATCH lines cannot carry")])
def test_a_workdir_that_cannot_go_on_an_sbatch_line_is_refused(value, fix):
    found = errors_of(workdir=value)
    assert "workdir" in found and fix in found["workdir"], found


def test_the_batch_script_never_passes_the_run_folder_as_an_option():
    """Issue 27, defence in depth: a run folder from before the workdir check ("-c<code>") is
    ./-prefixed on the python, srun and mkdir lines; one that #SBATCH cannot carry is refused."""
    from backend.errors import SpecError
    spec = slurm_from_dict(BASE)
    job = JobSpec(kind=JobKind.HARNESS, module="/x/synthetic.py")
    evil = "-c__import__(chr(111)+chr(115)).system(chr(105)+chr(100))#/runs/r1"   # no space, no quote
    text = batch_script(spec, job, run_dir=evil, run_id="r1", attempt=1, resume_step=None)
    assert f"'./{evil}/lib' slurm_task run --run-dir './{evil}'" in text, text
    assert f"mkdir -p -- './{evil}/logs'" in text and f"#SBATCH --output=./{evil}/logs/" in text
    assert " -c" not in text.replace(f"./{evil}", "RUN"), text
    with pytest.raises(SpecError) as err:
        batch_script(spec, job, run_dir="my runs/r1", run_id="r1", attempt=1, resume_step=None)
    assert str(err.value).startswith("workdir: 'my runs/r1' cannot go on an #SBATCH line"), str(err.value)


def test_a_queued_job_says_slurms_reason_and_its_place_and_the_run_shows_queued():
    from backend.engines.slurm_states import with_place
    from backend.records.outcome import shown_phase
    waiting = with_place(job("PENDING", "Priority", nodes="(null)"), ["40", "41", "42"])
    assert (waiting.position, waiting.waiting, waiting.queue) == (2, 3, "Priority, 2nd of 3 waiting")
    statuses = task_statuses(waiting, {}, NAMES)
    assert [s.label for s in statuses] == ["queued (Priority, 2nd of 3 waiting)"] * 2
    assert "Stop cancels it at once" in statuses[0].diagnosis
    assert shown_phase("running", statuses) == "queued (Priority, 2nd of 3 waiting)"
    # Not in the queue list (squeue failed, or it just started): the reason alone; running: running.
    assert task_statuses(with_place(job("PENDING", "JobHeldUser"), None), {}, NAMES)[0].label == "queued (JobHeldUser)"
    assert shown_phase("running", task_statuses(job("RUNNING"), {}, NAMES)) == "running"
    assert shown_phase("stopped", statuses) == "stopped"


def test_the_batch_script_asks_slurm_for_the_save_signal_ahead_of_the_time_limit():
    """USR2 (USR1 is the stack dump), ``preempt_grace_s`` ahead: the workers save before the kill."""
    job = JobSpec(kind=JobKind.HARNESS, module="/x/synthetic.py", params={"preempt_grace_s": 40})
    text = batch_script(slurm_from_dict(BASE), job, run_dir="r", run_id="r1", attempt=1, resume_step=None)
    assert "#SBATCH --signal=USR2@40" in text.splitlines()
    command = JobSpec(kind=JobKind.COMMAND, command=("python", "fit.py"))
    text = batch_script(slurm_from_dict(BASE), command, run_dir="r", run_id="r1", attempt=1, resume_step=None)
    assert "#SBATCH --signal=USR2@25" in text.splitlines()   # the Keras callback's default grace


def test_tasks_that_saved_on_the_signal_end_the_job_preempted_not_failed():
    saved = {n: {"info": {"node": "vm"}, "exit": 75} for n in NAMES}
    # COMPLETED: the wrappers answer srun 0 for 75 (slurm_task.py); the exit files keep 75.
    for state in (job("COMPLETED"), job("FAILED", "NonZeroExitCode", "75:0"), job("TIMEOUT", "TimeLimit", "0:15")):
        statuses = task_statuses(state, saved, NAMES)
        assert [(s.exit_code, s.preempted, s.diagnosis) for s in statuses] == [(75, True, None)] * 2
        assert conclude(statuses).verdict == Verdict.PREEMPTED
    # srun's --kill-on-bad-exit may end the peer before it writes its code: the job's 75 speaks.
    one = {"chief-0": {"info": {}, "exit": 75}, "worker-0": {"info": {}, "exit": None}}
    assert conclude(task_statuses(job("FAILED", "NonZeroExitCode", "75:0"), one, NAMES)).verdict \
        == Verdict.PREEMPTED


def test_a_task_that_saved_on_the_signal_is_no_bad_exit_for_srun_and_its_file_keeps_75(tmp_path):
    """srun's --kill-on-bad-exit must not KILL a peer still finishing its own save: the wrapper
    answers srun 0 for exit 75, the task's exit file (what the console reads) keeps 75; USR2
    reaches the job ignored unless it takes it (the wrapper must outlive it too)."""
    import subprocess
    import sys
    from tests.harness.conftest import host_argv
    env = {"PATH": "/usr/bin:/bin", "SLURM_PROCID": "0", "SLURM_STEP_NODELIST": "vm",
           "SLURM_STEP_TASKS_PER_NODE": "1", "SLURM_STEP_NUM_TASKS": "1"}
    job = "import signal, sys; sys.exit(75 if signal.getsignal(signal.SIGUSR2) == signal.SIG_IGN else 3)"
    proc = subprocess.run([*host_argv(str(tmp_path / "shipped"), "slurm_task", site=False), "run", "--run-dir", str(tmp_path),
                           "--tf-port", "23456", "--", sys.executable, "-c", job], env=env, timeout=60)
    assert proc.returncode == 0
    assert (tmp_path / "tasks" / "chief-0.exit").read_text().strip() == "75"


def test_attach_slurm_refuses_a_cluster_file_that_is_not_slurm(tmp_path):
    from backend.config.slurm_spec import load_slurm
    from backend.errors import SpecError
    (tmp_path / "hosts.yaml").write_text("tasks:\n  - {role: worker, host: 127.0.0.1, tf_port: 2222}\n")
    with pytest.raises(SpecError, match="is not a Slurm cluster file. Give a file with `kind: slurm`"):
        load_slurm(tmp_path / "hosts.yaml")


def test_a_restored_attempts_job_does_not_read_the_previous_jobs_exit_codes(tmp_path):
    """A Restore submits a new job into the run's folder, where the last job's tasks left
    ``tasks/<task>.exit`` (0) and their ``.json`` (job 2). Until the new job's wrapper starts and
    replaces them, they are not the new job's: read as its own, the restored attempt was
    "finished" before its tasks ran, and the keeper cancelled it (a full suite, one run in
    several). The probe is the one that runs on the login host; scontrol is not needed here."""
    from backend.client.harness import layout, slurm_task
    (tmp_path / layout.TASKS).mkdir()
    for name in ("chief-0", "worker-0"):
        (tmp_path / layout.TASKS / f"{name}.json").write_text('{"pid": 10, "node": "vm", "rank": 0, "job": "2"}')
        (tmp_path / layout.TASKS / f"{name}.exit").write_text("0\n")
    stale = slurm_task.probe(str(tmp_path), "3", ["chief-0", "worker-0"])["tasks"]
    assert stale == {"chief-0": {"info": None, "exit": None}, "worker-0": {"info": None, "exit": None}}
    own = slurm_task.probe(str(tmp_path), "2", ["chief-0"])["tasks"]["chief-0"]
    assert own["exit"] == 0 and own["info"]["job"] == "2"
