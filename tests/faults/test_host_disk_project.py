"""A host's disk cannot take the project (issue 49): a real 4 MiB tmpfs is the tasks' workdir on
both loopback SSH hosts. A small project fits and runs; a 6 MiB one is refused naming the host and
the full disk, with nothing half-written on the host (no partial tar in its cache, no half
`job/` folder), and the earlier run's cached copy and unpacked folder untouched.

Real parts: two sshd hosts, a real tmpfs (root), the launcher's parallel start. No TensorFlow."""
from __future__ import annotations

import os

import pytest

from backend.config.spec import cluster_from_dict, job_from_dict
from backend.errors import ConsoleError
from backend.runs import launcher
from backend.runs.store import RunStore
from rig import sshd
from tests.conftest import processes_of, ssh_task
from tests.faults.conftest import tmpfs


@pytest.fixture
def small_workdir(tmp_path):
    with tmpfs(tmp_path / "hostdisk") as root:
        yield root


def files_under(folder) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def test_a_host_disk_that_cannot_take_the_project_refuses_it_and_keeps_earlier_copies(
        ssh_hosts, client_key, python_path, small_workdir, tmp_path, ssh_options):
    cluster = cluster_from_dict({"tasks": [
        ssh_task(ssh_hosts[0], "chief", sshd.free_port(), client_key, python_path, small_workdir / "h2"),
        ssh_task(ssh_hosts[1], "worker", sshd.free_port(), client_key, python_path, small_workdir / "h3")]})
    store = RunStore(tmp_path / "runs")
    small = tmp_path / "small"
    small.mkdir()
    (small / "train.py").write_text("print('small project ran')\n")
    first = launcher.launch(cluster, job_from_dict({"kind": "command", "command": ["python3", "train.py"],
                                                    "project": str(small)}),
                            store=store, options=ssh_options, preflight=launcher.Preflight.SKIP)
    first.wait(timeout=60)
    assert first.reload().phase == "finished", first.log_tail("chief-0")
    before = {h: files_under(small_workdir / h) for h in ("h2", "h3")}
    assert any(p.startswith("projects/") and p.endswith(".tar") for p in before["h2"]), before

    big = tmp_path / "big"
    big.mkdir()
    (big / "train.py").write_text("print('never runs')\n")
    (big / "weights.bin").write_bytes(os.urandom(6 << 20))   # incompressible, over the 4 MiB disk
    with pytest.raises(ConsoleError) as err:
        launcher.launch(cluster, job_from_dict({"kind": "command", "command": ["python3", "train.py"],
                                                "project": str(big)}),
                        store=store, options=ssh_options, preflight=launcher.Preflight.SKIP)
    said = str(err.value)
    assert "no room for the project" in said and "127.0.0." in said and "df -h" in said, said
    for h in ("h2", "h3"):   # the failed run left nothing half-written; the earlier run is whole
        now = files_under(small_workdir / h)
        assert not [p for p in now if p.endswith(".part") or ".part/" in p], now
        assert [p for p in now if p.startswith("projects/")] == [p for p in before[h] if p.startswith("projects/")]
        assert set(before[h]) <= set(now)
        failed_runs = {p.split("/")[1] for p in now} - {p.split("/")[1] for p in before[h] if p.startswith("runs/")}
        assert not [p for p in now if p.split("/")[1:2] and p.split("/")[1] in failed_runs and "/job/" in p], now
    failed = [r for r in store.list() if r.run_id != first.run_id]
    assert [r.phase for r in failed] == ["failed"], failed
    assert processes_of(first) == []
