"""Helpers for harness tests: real worker processes on free localhost ports, CPU only.

Each worker starts in its own session (process group); teardown kills every group it started,
so a failed test leaves no TensorFlow process behind.
"""
from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import time

import pytest

from rig.sshd import free_port


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
def ship(run_dir: str) -> str:
    """The package as the launcher ships it (``bundle.harness_bundle``), unpacked into ``run_dir``:
    ``run_dir/lib``, the folder every host command runs (``layout.host_argv``)."""
    from backend.engines.bundle import harness_bundle
    os.makedirs(run_dir, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(harness_bundle())) as tar:
        tar.extractall(run_dir, filter="data")
    return os.path.join(run_dir, "lib")


def host_argv(run_dir: str, command: str, *args: str, site: bool = True) -> list[str]:
    """``python RUN/lib COMMAND ARGS`` from a copy shipped into ``run_dir`` (made once)."""
    from backend.client.harness import layout
    if not os.path.exists(os.path.join(run_dir, layout.LIB, "__main__.py")):
        ship(run_dir)
    return layout.host_argv(PYTHON, run_dir, command, *args, site=site)
SYNTHETIC = os.path.join(ROOT, "examples", "synthetic.py")
PYTHON = sys.executable
# Generous: other people run TensorFlow on this 2-core machine at the same time.
RUN_TIMEOUT = 240


def free_ports(n: int) -> list[int]:
    return [free_port() for _ in range(n)]


def worker_env(tf_config: dict | None, tmp: str | None = None) -> dict:
    """``tmp``: the worker's TMPDIR, made, as a host's start gives each task its own (spawn.py):
    the harness ends with os._exit, which leaves TensorFlow's temporary files behind."""
    env = dict(os.environ)
    if tmp:
        os.makedirs(tmp, exist_ok=True)
        env["TMPDIR"] = tmp
    env.update({"CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "2",
                "TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "2",
                "PYTHONUNBUFFERED": "1"})
    env.pop("TF_CONFIG", None)
    if tf_config is not None:
        env["TF_CONFIG"] = json.dumps(tf_config)
    return env


class Cluster:
    """Workers of one attempt: ``procs[i]`` is task worker-i, its log in ``logs[i]``."""

    def __init__(self, procs, logs, run_dir):
        self.procs, self.logs, self.run_dir = procs, logs, run_dir

    def wait(self, timeout: float = RUN_TIMEOUT) -> list[int]:
        deadline = time.time() + timeout
        codes = []
        for p in self.procs:
            try:
                codes.append(p.wait(timeout=max(1.0, deadline - time.time())))
            except subprocess.TimeoutExpired:
                raise AssertionError(f"worker did not finish in {timeout}s:\n{self.tails()}")
        return codes

    def log(self, i: int) -> str:
        with open(self.logs[i], errors="replace") as fh:
            return fh.read()

    def tails(self, n: int = 15) -> str:
        return "\n".join(f"--- worker-{i}\n" + "\n".join(self.log(i).splitlines()[-n:])
                         for i in range(len(self.procs)))


class Launcher:
    def __init__(self):
        self.started: list[subprocess.Popen] = []

    def start(self, run_dir: str, n: int = 2, job: str = SYNTHETIC, params=(), extra=(),
              run_id: str = "r", attempt: int = 0) -> Cluster:
        os.makedirs(os.path.join(run_dir, "logs"), exist_ok=True)
        ports = free_ports(n)
        procs, logs = [], []
        for i in range(n):
            cfg = None if n == 1 else {
                "cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]},
                "task": {"type": "worker", "index": i}}
            argv = [*host_argv(run_dir, "train"), "--run-dir", run_dir,
                    "--job", job, "--run-id", run_id, "--attempt", str(attempt), *extra]
            for kv in params:
                argv += ["--param", kv]
            log = os.path.join(run_dir, "logs", f"worker-{i}.a{attempt}.log")
            with open(log, "w") as fh:
                procs.append(subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT,
                                              env=worker_env(cfg, os.path.join(run_dir, "tmp", f"worker-{i}")),
                                              start_new_session=True))
            logs.append(log)
        self.started += procs
        return Cluster(procs, logs, run_dir)

    def kill_all(self):
        for p in self.started:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait(timeout=30)


@pytest.fixture
def launcher():
    lw = Launcher()
    yield lw
    lw.kill_all()


def read_metrics(run_dir: str) -> list[dict]:
    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as fh:
        return [json.loads(line) for line in fh if line.strip()]


class TrainedRun:
    """One finished two-worker run shared by several tests (it costs ~10 s of CPU)."""

    STEPS_PER_EPOCH = 100
    EPOCHS = 2
    PARAMS = ("epochs=2", "steps_per_epoch=100", "log_every=10", "checkpoint_every=50",
              "keep_checkpoints=10", "seed=3")

    def __init__(self, run_dir, cluster):
        self.run_dir, self.cluster = run_dir, cluster
        self.metrics = read_metrics(run_dir)


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory):
    lw = Launcher()
    try:
        run_dir = str(tmp_path_factory.mktemp("trained") / "run")
        cluster = lw.start(run_dir, n=2, params=TrainedRun.PARAMS, run_id="shared")
        codes = cluster.wait()
        assert codes == [0, 0], cluster.tails()
        yield TrainedRun(run_dir, cluster)
    finally:
        lw.kill_all()
