"""GPU readings from every host of a run, not only the chief's (issue 26 item 4).

No GPU here: each SSH test host gets its own FAKE ``nvidia-smi``, first on the PATH of that
host's SSH sessions, answering different numbers (as the real one answers
``--query-gpu=... --format=csv,noheader,nounits``), so the test sees which host each reading
came from. The run itself is a plain command job on a chief (127.0.0.2) and a worker (127.0.0.3).
"""
from __future__ import annotations

import os
import sys

import pytest

from backend.config.spec import job_from_dict
from backend.runs import launcher
from backend.runs.store import RunStore
from backend.watch.metrics import MetricsStore
from console import monitor_view
from tests.conftest import wait_for

FAKE = {"127.0.0.2": "0, 11, 1000, 16000\n",
        "127.0.0.3": "0, 77, 7000, 16000\n1, 5, 500, 16000\n"}


@pytest.fixture
def fake_gpus(ssh_hosts, tmp_path):
    """Each host's sessions find its own fake nvidia-smi first on PATH; undone afterwards."""
    saved = {}
    for host in ssh_hosts:
        bin_dir = tmp_path / f"gpus-{host.address}"
        bin_dir.mkdir()
        fake = bin_dir / "nvidia-smi"
        fake.write_text("#!/bin/sh\ncat <<'EOF'\n" + FAKE[host.address] + "EOF\n")
        fake.chmod(0o755)
        wrapper = host.folder / "session.sh"
        saved[wrapper] = wrapper.read_text()
        _replace(wrapper, saved[wrapper].replace("export HOME=", f"export PATH={bin_dir}:$PATH\nexport HOME=", 1))
    yield FAKE
    for wrapper, text in saved.items():
        _replace(wrapper, text)


def _replace(path, text: str) -> None:
    """Whole or not at all: sshd runs this wrapper for every session, maybe right now."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.chmod(0o755)
    os.replace(tmp, path)


@pytest.mark.slow
def test_monitor_reads_the_gpus_of_every_host(ssh_cluster, ssh_options, fake_gpus, tmp_path):
    job = job_from_dict({"kind": "command", "command": [sys.executable, "-c", "import time; time.sleep(120)"]})
    store = RunStore(tmp_path / "runs")
    run = launcher.launch(ssh_cluster, job, store=store, options=ssh_options, preflight=launcher.Preflight.SKIP)
    mon = run.monitor(MetricsStore()).start()
    try:
        samples = wait_for(lambda: (lambda s: len(s) == 2 and s)(mon.gpu()), 60,
                           "GPU readings from both hosts")
        # What Monitor's GPU panel shows: per host, each GPU's latest utilisation and memory.
        assert monitor_view.gpu_rows(samples) == [
            {"host": "127.0.0.2", "GPU": 0, "utilisation %": 11.0, "memory used MiB": 1000.0,
             "memory total MiB": 16000.0},
            {"host": "127.0.0.3", "GPU": 0, "utilisation %": 77.0, "memory used MiB": 7000.0,
             "memory total MiB": 16000.0},
            {"host": "127.0.0.3", "GPU": 1, "utilisation %": 5.0, "memory used MiB": 500.0,
             "memory total MiB": 16000.0}]
    finally:
        mon.stop()
        run.stop()
