"""Launch, inspect and stop a multi-worker run: all or nothing, on every host at once.

Each task starts through ``harness/spawn.py`` on its host, detached in its own session and
process group; its pid, pgid, exit code and log stay in the run directory on that host, and the
run's state is saved locally (``backend.runs``) so any later process can reattach and stop it.
"""
from __future__ import annotations

import base64
import enum
import io
import json
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

from backend import diagnose, tfconfig
from backend.errors import ConsoleError, HostError, MultiHostError, RunError
from backend.harness import layout
from backend.hosts.pool import Pool, connection_key, failures, make_transport, parallel
from backend.hosts.ssh import SSHOptions
from backend.preflight import require_preflight
from backend.runs import Attempt, RunState, RunStore, TaskState, check_run_id, new_run_id
from backend.spec import ClusterSpec, JobKind, JobSpec, RestartMode, TaskSpec, cluster_from_dict, cluster_to_dict, job_from_dict, job_to_dict

HARNESS_DIR = Path(__file__).parent / "harness"
AGENT = Path(__file__).parent / "watch" / "agent.py"
START_CHECK_S = 3.0   # a task that dies this soon after starting failed to start (checked on the host)
# One command per host per attempt: unpack the harness, then start that host's tasks.
BOOT = """import base64, io, json, os, sys, tarfile
run = sys.argv[1]
req = json.load(sys.stdin)
tar = tarfile.open(fileobj=io.BytesIO(base64.b64decode(req["bundle"])))
tar.extractall(run, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
sys.path.insert(0, os.path.join(run, "harness"))
import spawn
print(json.dumps(spawn.start_many(run, req["tasks"], req["wait"], req["settle"])))
"""


class Preflight(enum.Enum):
    REQUIRED = "required"  # refuse to launch when any host fails a check
    SKIP = "skip"          # the caller has just run it (the console shows its table first)


@dataclass
class TaskStatus:
    name: str
    host: str
    state: str                   # starting, running, exited, lost, unreachable
    exit_code: int | None = None
    diagnosis: str | None = None

    @property
    def label(self) -> str:
        return f"exited({self.exit_code})" if self.state == "exited" else self.state


class Run:
    """A handle on one run: from ``launch`` or ``attach``. Not tied to the process that launched it."""

    def __init__(self, state: RunState, store: RunStore, pool: Pool) -> None:
        self.state, self.store, self.pool = state, store, pool
        self.cluster: ClusterSpec = cluster_from_dict(state.cluster)
        self.job: JobSpec = job_from_dict(state.job)

    @property
    def run_id(self) -> str:
        return self.state.run_id

    @property
    def local_dir(self) -> Path:
        return self.store.path(self.run_id)

    def task_spec(self, name: str) -> TaskSpec:
        return self.cluster.tasks[self._task(name).position]

    def transport(self, name: str):
        return self.pool.transport(self.task_spec(name))

    def monitor(self, store, *, poll: bool = False):
        """A watch agent on the chief feeding ``store`` (a ``MetricsStore``); call ``.start()``."""
        from backend.watch.monitor import RunMonitor  # watchdog is needed only by who monitors
        chief = self.state.chief
        spec = self.task_spec(chief.name)
        return RunMonitor(lambda: make_transport(spec, self.pool.options), chief.remote_run_dir,
                          str(self.local_dir), store, python=spec.python, poll=poll,
                          agent_path=f"{chief.remote_run_dir}/{layout.HARNESS}/watch_agent.py")

    def _task(self, name: str) -> TaskState:
        for t in self.state.tasks:
            if t.name == name:
                return t
        raise RunError(f"run {self.run_id} has no task {name!r}",
                       f"Use one of: {', '.join(t.name for t in self.state.tasks)}.")

    def _by_host(self) -> list[tuple[str, tuple[TaskSpec, str, list[str]]]]:
        """Tasks grouped per connection and remote run dir: one command per host, not per task."""
        groups: dict[tuple, list[TaskState]] = {}
        for t in self.state.tasks:
            key = (*connection_key(self.cluster.tasks[t.position]), t.remote_run_dir)
            groups.setdefault(key, []).append(t)
        return [(g[0].name, (self.cluster.tasks[g[0].position], g[0].remote_run_dir, [t.name for t in g]))
                for g in groups.values()]

    def _spawn(self, spec: TaskSpec, run_dir: str, args: list[str], **kw):
        # -S: spawn.py needs only the standard library, and skipping site-packages saves startup.
        return self.pool.transport(spec).run(
            [spec.python, "-S", f"{run_dir}/{layout.HARNESS}/spawn.py", *args], **kw)

    def status(self) -> list[TaskStatus]:
        def one(item):
            spec, run_dir, names = item
            argv = ["status", "--run", run_dir] + [a for n in names for a in ("--task", n)]
            result = self._spawn(spec, run_dir, argv, timeout=30)
            if not result.ok:
                raise HostError(spec.host, "status failed", "Check the host.", stderr_tail=result.stderr)
            return json.loads(result.stdout)
        groups = self._by_host()
        results = parallel(one, groups)
        out: dict[str, TaskStatus] = {}
        for key, (_, _, names) in groups:
            res = results[key]
            for name in names:
                host = self._task(name).host
                if isinstance(res, Exception):
                    out[name] = TaskStatus(name, host, "unreachable", diagnosis=str(res))
                else:
                    info = res.get(name, {"state": "lost"})
                    out[name] = TaskStatus(name, host, info["state"], info.get("exit_code"))
        for s in out.values():
            if s.state == "exited" and s.exit_code != 0:
                s.diagnosis = diagnose.diagnose(self.log_tail(s.name))
        return [out[t.name] for t in self.state.tasks if t.name in out]

    def log_tail(self, name: str, max_bytes: int = 20000) -> str:
        t = self._task(name)
        path = layout.log_file(t.remote_run_dir, name)
        try:
            result = self.transport(name).run(["tail", "-c", str(max_bytes), path], timeout=30)
        except HostError as err:
            return f"(log unavailable: {err})"
        return result.stdout if result.ok else ""

    def follow(self, name: str):
        """Yield the task's log lines as they are written (``logs --follow``)."""
        t = self._task(name)
        stream = self.transport(name).stream(["tail", "-n", "+1", "-F", layout.log_file(t.remote_run_dir, name)])
        try:
            for line in stream.stdout:
                yield line.decode(errors="replace").rstrip("\n")
        finally:
            stream.close()

    def stop(self, *, grace_s: float = 10.0, reason: str = "stopped", phase: str = "stopped") -> None:
        """TERM then KILL every task's process group; raise unless nothing is left anywhere.

        ``phase`` is what the run becomes: the keeper passes ``restarting``; any other caller's
        stop leaves a marker first, so a keeper that is restarting the run sees it and yields.
        """
        if phase == "stopped":
            mark_stop_requested(self.local_dir)
        def one(item):
            spec, run_dir, names = item
            argv = ["stop", "--run", run_dir, "--grace", str(grace_s)] + [a for n in names for a in ("--task", n)]
            result = self._spawn(spec, run_dir, argv, timeout=grace_s + 30)
            left = {n: r["left"] for n, r in json.loads(result.stdout or "{}").items() if r["left"]}
            if not result.ok or left:
                raise HostError(spec.host, f"processes still alive after stop: {left}",
                                "Stop them by hand (kill -9) and report a bug.", stderr_tail=result.stderr)
        errors = failures(parallel(one, self._by_host()))
        self.mirror_logs()
        if self.state.live:
            self.finish_attempt(reason, phase=phase)
        if errors:
            raise MultiHostError("stop", errors, "Check those hosts; `stop` can be run again.")

    def finish_attempt(self, reason: str, *, phase: str) -> None:
        if self.state.attempts and self.state.attempts[-1].ended is None:
            self.state.attempts[-1].ended = time.time()
            self.state.attempts[-1].reason = reason
        self.state.phase = phase
        self.store.save(self.state)

    def mirror_logs(self) -> None:
        """Copy each task's log into the local run directory (best effort: hosts may be gone)."""
        (self.local_dir / layout.LOGS).mkdir(parents=True, exist_ok=True)
        for t in self.state.tasks:
            try:
                self.transport(t.name).get(layout.log_file(t.remote_run_dir, t.name),
                                           str(self.local_dir / layout.LOGS / f"{t.name}.log"))
            except (HostError, OSError):
                continue

    def wait(self, timeout: float, poll_s: float = 1.0) -> list[TaskStatus]:
        """Block until every task has exited (or is lost); refresh the saved phase."""
        deadline = time.time() + timeout
        while True:
            if self.job.restart.mode == RestartMode.ON_FAILURE:
                # The keeper owns the outcome of such a run (a failed task may be restarted).
                self.state = self.store.load(self.run_id)
                if not self.state.live:
                    return self.status()
                statuses = []
            else:
                statuses = self.status()
            if statuses and all(s.state in ("exited", "lost") for s in statuses):
                ok = all(s.state == "exited" and s.exit_code == 0 for s in statuses)
                self.mirror_logs()
                self.finish_attempt("finished" if ok else "failed", phase="finished" if ok else "failed")
                return statuses
            if time.time() > deadline:
                raise RunError(f"run {self.run_id} still running after {timeout:.0f} s",
                               f"Check `python -m backend status {self.run_id}`, or stop it.")
            time.sleep(poll_s)

    def request_save(self) -> str:
        """Ask the chief to save at its next sync point: a request file in its run directory."""
        chief = self.state.chief
        name = f"save-{int(time.time() * 1000)}.json"
        result = self.transport(chief.name).run(
            ["sh", "-c", 'mkdir -p "$1" && printf "{}" > "$1/$2"', "sh",
             f"{chief.remote_run_dir}/{layout.REQUESTS}", name], timeout=30)
        if not result.ok:
            raise HostError(chief.host, "could not write the save request", "Check the chief's disk.",
                            stderr_tail=result.stderr)
        return name


STOP_MARKER = "stop.requested"   # in the local run dir: written by a user's stop, read by the keeper


def mark_stop_requested(local_dir: Path) -> None:
    local_dir.mkdir(parents=True, exist_ok=True)
    (local_dir / STOP_MARKER).write_text(f"{time.time()}\n")


# -- launching ------------------------------------------------------------------------------
def _bundle(job: JobSpec) -> bytes:
    """The files every host needs, as one tar sent on stdin: one command per host."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for path in sorted(HARNESS_DIR.glob("*.py")):
            tar.add(path, arcname=f"{layout.HARNESS}/{path.name}")
        if AGENT.exists():
            tar.add(AGENT, arcname=f"{layout.HARNESS}/watch_agent.py")
        if job.kind == JobKind.HARNESS:
            tar.add(job.module, arcname=f"{layout.JOB}/{Path(job.module).name}")
    return buf.getvalue()


def task_argv(job: JobSpec, spec: TaskSpec, run_dir: str, run_id: str, attempt: int,
              resume_step: int | None) -> list[str]:
    if job.kind == JobKind.COMMAND:
        command = list(job.command)
        return [spec.python, *command] if command[0].endswith(".py") else command
    argv = [spec.python, f"{run_dir}/{layout.HARNESS}/train.py", "--run-dir", run_dir,
            "--job", f"{run_dir}/{layout.JOB}/{Path(job.module).name}",
            "--run-id", run_id, "--attempt", str(attempt)]
    for key, value in job.params.items():
        argv += ["--param", f"{key}={value}"]
    if resume_step is not None:
        argv += ["--resume-step", str(resume_step)]
    return argv


def task_env(cluster: ClusterSpec, position: int, job: JobSpec, run_dir: str, run_id: str,
             attempt: int, name: str) -> dict[str, str]:
    spec = cluster.tasks[position]
    return {**job.env,
            "TF_CONFIG": json.dumps(tfconfig.tf_config(cluster, position)),
            # An empty list hides every GPU: a CPU task must not grab one by accident.
            "CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in spec.gpus),
            "PYTHONUNBUFFERED": "1",
            "TFCONSOLE_RUN_DIR": run_dir, "TFCONSOLE_RUN_ID": run_id,
            "TFCONSOLE_ATTEMPT": str(attempt), "TFCONSOLE_TASK": name}


def launch(cluster: ClusterSpec, job: JobSpec, *, store: RunStore | None = None,
           options: SSHOptions | None = None, preflight: Preflight = Preflight.REQUIRED,
           run_id: str | None = None) -> Run:
    """Start every task, or none: if any fails to start, the started ones are stopped."""
    tfconfig.require_valid(cluster)
    store = store or RunStore()
    run_id = check_run_id(run_id or new_run_id())
    if store.path(run_id).exists():
        raise RunError(f"run {run_id} already exists", "Choose another run id.")
    pool = Pool(options)
    if preflight == Preflight.REQUIRED:
        require_preflight(cluster, pool)
    names = cluster.task_names()
    state = RunState(run_id, time.time(), cluster_to_dict(cluster), job_to_dict(job),
                     [TaskState(n, i, t.host, layout.run_dir(t.workdir, run_id))
                      for i, (n, t) in enumerate(zip(names, cluster.tasks))])
    store.save(state)
    run = Run(state, store, pool)
    start_attempt(run, resume_step=None)
    if job.restart.mode == RestartMode.ON_FAILURE:
        from backend import keeper  # it imports this module
        keeper.start_keeper(run)
    return run


def start_attempt(run: Run, *, resume_step: int | None) -> None:
    """Start every task of a new attempt; on any failure stop the others and raise."""
    attempt = run.state.attempt + 1
    run.state.attempts.append(Attempt(attempt, time.time(), resume_step=resume_step))
    run.state.phase = "launching"
    run.store.save(run.state)

    bundle = base64.b64encode(_bundle(run.job)).decode()

    def one(item) -> None:
        spec, run_dir, names = item
        tasks = [run._task(n) for n in names]
        request = {"bundle": bundle, "wait": 20, "settle": START_CHECK_S, "tasks": [
            {"task": t.name,
             "argv": task_argv(run.job, run.cluster.tasks[t.position], run_dir, run.run_id, attempt, resume_step),
             "env": task_env(run.cluster, t.position, run.job, run_dir, run.run_id, attempt, t.name)}
            for t in tasks]}
        result = run.pool.transport(spec).run([spec.python, "-S", "-c", BOOT, run_dir],
                                              stdin=json.dumps(request).encode(), timeout=120)
        if not result.ok:
            raise HostError(spec.host, f"could not start {', '.join(names)} in {run_dir}",
                            "Check the task's Python and that the working directory is writable (preflight).",
                            stderr_tail=result.stderr)
        answers = json.loads(result.stdout.strip().splitlines()[-1])
        for t in tasks:
            info = answers[t.name]
            # "starting": the supervisor runs but a loaded host has not recorded the pid yet;
            # the status check below and stop() read the pid from the host, so that is fine.
            if info["state"] == "lost" or (info["state"] == "exited" and info["exit_code"] != 0):
                log = run.log_tail(t.name, 2000)
                raise HostError(spec.host, f"task {t.name} did not start (exit {info.get('exit_code')})",
                                diagnose.diagnose(log) or "Check the task's Python and command.",
                                stderr_tail=log)
            t.pid, t.pgid, t.started = info.get("pid"), info.get("pgid"), info.get("started")

    errors = failures(parallel(one, run._by_host()))
    if errors:
        try:
            run.stop(grace_s=5, reason="failed to start", phase="failed")
        except ConsoleError:
            pass  # the launch error below is the one to show; stop's own error names leftovers
        run.finish_attempt("failed to start", phase="failed")
        raise MultiHostError("launch", errors, "Nothing is left running. Fix the cause and launch again.")
    run.state.phase = "running"
    run.store.save(run.state)


def attach(run_id: str, *, store: RunStore | None = None, options: SSHOptions | None = None) -> Run:
    """A handle on an existing run, from its saved state: for status, logs and stop."""
    store = store or RunStore()
    return Run(store.load(run_id), store, Pool(options))
