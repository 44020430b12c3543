"""GPU watch: the agent samples ``nvidia-smi`` and the monitor and Monitor's charts carry it.

This machine may have no GPU: then a FAKE ``nvidia-smi`` script (it prints fixed CSV readings,
as the real one answers ``--query-gpu=... --format=csv,noheader,nounits``) stands first on PATH,
because a real GPU cannot run here. Where a real ``nvidia-smi`` exists, the same tests run
against it and check the shape of its readings instead of fixed values.
"""
from __future__ import annotations

import os
import shutil
import socket
import sys

import pytest

from backend.hosts.local import LocalTransport
from backend.watch.metrics import MetricsStore
from backend.watch import RunMonitor
from backend.client.harness.watch import parse_gpus
from console import figures
from tests.conftest import wait_for
from rig.watch_run import AgentProc, make_run

REAL = shutil.which("nvidia-smi")
FAKE_CSV = "0, 37, 1024, 16384\n1, [N/A], 2048, 16384\n"


@pytest.fixture
def nvidia_smi(tmp_path, monkeypatch):
    """The real nvidia-smi where there is one; else a fake on PATH (this machine has no GPU)."""
    if REAL:
        return None
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "nvidia-smi"
    fake.write_text("#!/bin/sh\ncat <<'EOF'\n" + FAKE_CSV + "EOF\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    return fake


def check_readings(gpus: list[dict]) -> None:
    assert gpus, "no GPU reading"
    if REAL:
        for g in gpus:
            assert isinstance(g["index"], int) and g["mem_total_mib"] and g["mem_total_mib"] > 0
        return
    assert gpus == [{"index": 0, "util": 37.0, "mem_used_mib": 1024.0, "mem_total_mib": 16384.0},
                    {"index": 1, "util": None, "mem_used_mib": 2048.0, "mem_total_mib": 16384.0}]


def test_parse_skips_what_it_cannot_read():
    assert parse_gpus("0, 5, 10, 20\ngarbage\n1, 7.5, 11, 20\n") == [
        {"index": 0, "util": 5.0, "mem_used_mib": 10.0, "mem_total_mib": 20.0},
        {"index": 1, "util": 7.5, "mem_used_mib": 11.0, "mem_total_mib": 20.0}]


def test_agent_sends_gpu_readings(nvidia_smi, tmp_path):
    agent = AgentProc(make_run(tmp_path / "run"))
    try:
        agent.wait(lambda: agent.of("gpu"))
        event = agent.of("gpu")[0]
        assert event["host"] == socket.gethostname()
        check_readings(event["gpus"])
    finally:
        agent.close()


def test_agent_without_nvidia_smi_sends_none(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))   # no nvidia-smi (nor anything else)
    agent = AgentProc(make_run(tmp_path / "run"))
    try:
        agent.wait(lambda: len(agent.of("heartbeat")) >= 2, timeout=15)
        assert agent.of("gpu") == []
    finally:
        agent.close()


def test_monitor_plots_each_hosts_gpus(nvidia_smi, tmp_path):
    mon = RunMonitor(LocalTransport, str(make_run(tmp_path / "run")), str(tmp_path / "local"),
                     MetricsStore(), python=sys.executable, backoff=(0.05, 0.2)).start()
    try:
        samples = wait_for(lambda: mon.gpu(), 20, "GPU samples in the monitor")
        (host, readings), = samples.items()
        check_readings(readings[0][1])
        fig = figures.gpu_figure(samples)
        assert {t.name for t in fig.data} == {f"{host} GPU {g['index']}" for g in readings[0][1]}
        mem = figures.gpu_figure(samples, "mem_used_mib", title="GPU memory used", y_title="MiB")
        if not REAL:
            assert list(mem.data[0].y)[:1] == [1024.0]
    finally:
        mon.stop()
