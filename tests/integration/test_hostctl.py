"""The host-side command line (harness/hostctl.py) through its client (backend.hosts.remote), for real:
installed with mkdir and the host's Python (backend/hosts/unpack.py), tasks started and stopped as
real processes, files read and written, over the local transport and over real sshd."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from backend.hosts import remote
from backend.errors import HostError
from backend.client.harness import layout
from backend.engines.bundle import harness_bundle
from backend.hosts.local import LocalTransport
from backend.hosts.ssh import SSHTransport
from tests.conftest import ps, wait_for

SLEEPER = [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(120)"]


@pytest.fixture
def local_host(tmp_path):
    h = remote.Host(LocalTransport(), sys.executable, str(tmp_path / "run"))
    remote.install(h, harness_bundle())
    return h


def alive(pid: int) -> bool:
    stat = subprocess.run(["ps", "-o", "stat=", "-p", str(pid)], capture_output=True, text=True).stdout
    return bool(stat.strip()) and not stat.strip().startswith("Z")


def test_the_run_directory_is_its_owners_only(local_host):
    """Logs, checkpoints, exports and their metadata live under it: no other user of the host
    can read them (docs/team.md, "Opening the console")."""
    assert stat.S_IMODE(os.stat(local_host.run_dir).st_mode) == 0o700
    assert sorted(os.listdir(local_host.run_dir)) == [layout.LIB]   # tar left the mode alone


def test_start_status_logs_stop(local_host):
    started = remote.start(local_host, [{"task": "worker-0", "argv": SLEEPER, "env": {"SECRET": "s"}}],
                           wait_s=20, settle_s=0)
    info = started["worker-0"]
    assert info.state in ("running", "starting") and info.pgid
    wait_for(lambda: b"up" in remote.read_tail(local_host, "logs/worker-0.log", 1000), 30, "the task's output")
    assert remote.status(local_host, ["worker-0"])["worker-0"].state == "running"
    assert alive(info.pid)
    assert remote.stop(local_host, ["worker-0"], grace_s=5) == {"worker-0": []}
    after = remote.status(local_host, ["worker-0"])["worker-0"]
    assert after.state == "exited" and not alive(info.pid)
    # The environment reached the task, never an argv that ps would show.
    assert not [line for line in ps() if "SECRET" in line]


def test_files_round_trip_in_chunks(local_host, tmp_path, monkeypatch):
    monkeypatch.setattr(remote, "CHUNK", 1000)   # several calls each way
    payload = os.urandom(4321)
    (tmp_path / "out.bin").write_bytes(payload)
    assert remote.push_file(local_host, tmp_path / "out.bin", "checkpoints/deep/ckpt.data") == 4321
    assert not Path(local_host.run_dir, "checkpoints/deep/ckpt.data.part").exists()
    assert remote.fetch_file(local_host, "checkpoints/deep/ckpt.data", tmp_path / "back.bin") == 4321
    assert (tmp_path / "back.bin").read_bytes() == payload
    assert remote.read_tail(local_host, "checkpoints/deep/ckpt.data", 2500) == payload[-2500:]
    assert remote.read_tail(local_host, "logs/none.log", 100) == b""
    with pytest.raises(remote.MissingFile, match="no file"):
        remote.fetch_file(local_host, "nothing/here", tmp_path / "x")


def test_fetch_new_copies_only_what_grew_and_never_a_link(local_host, tmp_path, monkeypatch):
    """`tfconsole tensorboard` mirrors the chief's event files this way: a file that grew gets its
    new bytes appended, in chunks; a link in the folder (to a secret elsewhere) is not followed."""
    monkeypatch.setattr(remote, "CHUNK", 1000)
    there = Path(local_host.run_dir, "tensorboard")
    (there / "validation").mkdir(parents=True)
    (there / "events.1").write_bytes(b"a" * 2500)
    (there / "validation" / "events.2").write_bytes(b"b" * 10)
    (tmp_path / "secret").write_text("key")
    (there / "link").symlink_to(tmp_path / "secret")
    here = tmp_path / "mirror"
    assert remote.fetch_new(local_host, "tensorboard", here) == (2, 2510)
    with open(there / "events.1", "ab") as fh:
        fh.write(b"c" * 1500)
    assert remote.fetch_new(local_host, "tensorboard", here) == (1, 1500)
    assert (here / "events.1").read_bytes() == (there / "events.1").read_bytes()
    assert (here / "validation" / "events.2").read_bytes() == b"b" * 10 and not (here / "link").exists()
    assert remote.fetch_new(local_host, "nothing", here) == (0, 0)


def test_private_files_and_exact_chunks(local_host, tmp_path, monkeypatch):
    monkeypatch.setattr(remote, "CHUNK", 1000)
    assert remote.put_bytes(local_host, b"SECRET=1\n", "slurm/attempt-1.sbatch", private=True) == 9
    written = Path(local_host.run_dir, "slurm/attempt-1.sbatch")
    assert written.read_bytes() == b"SECRET=1\n" and written.stat().st_mode & 0o777 == 0o600
    assert written.parent.stat().st_mode & 0o777 == 0o700
    assert remote.put_bytes(local_host, b"x" * 2000, "two-chunks.bin") == 2000   # a multiple of CHUNK
    assert Path(local_host.run_dir, "two-chunks.bin").read_bytes() == b"x" * 2000
    assert remote.put_bytes(local_host, b"", "empty") == 0 and Path(local_host.run_dir, "empty").read_bytes() == b""


@pytest.mark.parametrize("rel", ["../escape", "/etc/passwd", "a/../../b"])
def test_paths_stay_inside_the_run_directory(local_host, tmp_path, rel):
    with pytest.raises(HostError, match="not inside the run directory"):
        remote.fetch_file(local_host, rel, tmp_path / "x")


def test_progress_reads_the_last_complete_line(local_host):
    assert remote.progress(local_host) == remote.MetricsTail(None, None)
    rows = [json.dumps({"step": s, "attempt": 1}) for s in (5, 10)]
    Path(local_host.run_dir, layout.METRICS).write_text("\n".join(rows) + '\n{"step": 15, "att')
    got = remote.progress(local_host)
    assert got.last_line == rows[-1] and got.size == Path(local_host.run_dir, layout.METRICS).stat().st_size


def test_save_request_and_its_answer(local_host):
    name = remote.request_save(local_host)
    folder = Path(local_host.run_dir, layout.REQUESTS)
    assert (folder / name).read_text() == "{}" and [p.name for p in folder.iterdir()] == [name]
    assert remote.save_done(local_host, name) is None
    (folder / name.replace(".json", ".done")).write_text('{"step": 40}')
    assert remote.save_done(local_host, name) == 40
    with pytest.raises(HostError, match="not a save request name"):
        remote.save_done(local_host, "../x.json")


def test_exports_lists_finished_ones(local_host):
    folder = Path(local_host.run_dir, layout.EXPORTS)
    (folder / "a").mkdir(parents=True)
    (folder / "a" / "result.json").write_text('{"name": "a"}')
    (folder / ".partial").mkdir()
    (folder / "b").mkdir()   # no result.json yet: still exporting
    assert remote.exports(local_host) == [{"name": "a"}]


def make_ckpt(folder: Path, step: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for suffix in ("index", "data-00000-of-00001"):
        (folder / f"ckpt-{step}.{suffix}").write_text("x")
    (folder / f"ckpt-{step}.meta.json").write_text(json.dumps({"step": step, "time": 0, "global_loss": 1.0}))


def test_checkpoint_actions_are_hostctl_subcommands(local_host):
    """List, hold, release, abandon and resumed answer in hostctl's protocol; a refusal is a
    ``Refused`` naming the host, with the host's own reason."""
    for step in (10, 20):
        make_ckpt(Path(local_host.run_dir, layout.CHECKPOINTS), step)
    hold = remote.ckpt_hold(local_host, layout.CHECKPOINTS, None, purpose="export", ttl_s=60)
    assert hold["step"] == 20
    listed = remote.ckpt_list(local_host, layout.CHECKPOINTS)
    assert [(c["step"], c["held"]) for c in listed] == [(10, []), (20, ["export"])]
    with pytest.raises(remote.Refused) as err:
        remote.ckpt_hold(local_host, layout.CHECKPOINTS, 99, purpose="restore", ttl_s=None)
    assert err.value.host == local_host.name and err.value.reason.startswith("checkpoint step 99 is not complete")
    assert remote.ckpt_release(local_host, layout.CHECKPOINTS, hold["hold"]) is True
    assert remote.ckpt_abandon(local_host, layout.CHECKPOINTS, after=10, tag="t1", keep_hold=None) == [20]
    assert [c["step"] for c in remote.ckpt_abandoned(local_host, layout.CHECKPOINTS)] == [20]
    assert remote.resumed(local_host, 1, ["worker-0"]) == {"resumed": {}, "ended": []}


def test_an_export_refusal_comes_back_in_the_same_shape(local_host):
    """export.py runs in hostctl's child process; its refusal is hostctl's FAILED answer."""
    with pytest.raises(remote.Refused) as err:
        remote.export(local_host, "job/none.py", step=5, name=None, formats=("keras",), timeout=120)
    assert err.value.reason.startswith("EXPORT REFUSED: no complete checkpoint"), err.value.reason
    assert err.value.host == local_host.name and err.value.exit_code == remote.FAILED


def test_read_file_and_follow(local_host):
    """``train.json`` is read through hostctl (no ``cat``); a log is followed through hostctl's
    ``follow`` stream (no ``tail -F``): lines written before and after it started."""
    assert remote.read_file(local_host, "train.json") is None
    Path(local_host.run_dir, "train.json").write_text('{"total_steps": 7}')
    assert json.loads(remote.read_file(local_host, "train.json")) == {"total_steps": 7}
    log = Path(local_host.run_dir, "logs", "worker-0.log")
    log.parent.mkdir()
    log.write_text("first\n")
    stream = remote.follow(local_host, "logs/worker-0.log")
    try:
        lines = iter(stream.stdout)
        assert next(lines) == b"first\n"
        with open(log, "a") as fh:
            fh.write("second\n")
        assert next(lines) == b"second\n"
    finally:
        stream.close()


def test_hosts_sharing_a_filesystem_unpack_one_run_folder_at_the_same_moment(tmp_path):
    """Hosts with one home (an NFS home; the loopback test hosts) install a run's harness into
    the same folder at once. GNU tar makes a member's missing folder itself, and two tars racing
    to make it fail ("harness/__init__.py: Cannot open: No such file or directory", seen in CI;
    with tar about one pair in four failed here). 40 runs, two hosts each, started together."""
    bundle = harness_bundle()
    failed = [err for n in range(40) for err in _install_together(tmp_path / f"run{n}", bundle) if err]
    assert failed == [], failed[:2]
    assert all((tmp_path / f"run{n}" / layout.LIB / layout.PACKAGE / "harness" / "hostctl.py").is_file() for n in range(40))


def _install_together(run_dir: Path, bundle: bytes) -> list[str]:
    """Two hosts install into ``run_dir`` starting at the same moment; their errors ("": none)."""
    ready = threading.Barrier(2)

    def install(host: str) -> str:
        h = remote.Host(LocalTransport(host), sys.executable, str(run_dir))
        ready.wait()
        try:
            remote.install(h, bundle)
        except HostError as err:
            return str(err)
        return ""
    with ThreadPoolExecutor(2) as pool:
        return list(pool.map(install, ["host-a", "host-b"]))


def test_a_status_read_while_a_restart_installs_again_sees_a_whole_harness(local_host):
    """A restart installs the harness again while the console and the CLI run hostctl from it.
    Rewritten in place (tar), a status started meanwhile read half of hostctl.py (CI: an
    IndentationError, the run's tasks shown unreachable). 150 installs beside a status loop."""
    bundle, done, errors = harness_bundle(), threading.Event(), []

    def read_status() -> None:
        while not done.is_set():
            try:
                remote.status(local_host, ["worker-0"])
            except HostError as err:
                errors.append(str(err))
    reader = threading.Thread(target=read_status)
    reader.start()
    try:
        for _ in range(150):
            remote.install(local_host, bundle)
    finally:
        done.set()
        reader.join()
    assert errors == [], errors[:2]


def test_a_host_without_the_harness_says_so(tmp_path):
    h = remote.Host(LocalTransport(), sys.executable, str(tmp_path / "never-installed"))
    with pytest.raises(remote.NotInstalled, match="no harness"):
        remote.status(h, ["worker-0"])
    assert remote.read_tail(h, "logs/worker-0.log", 100) == b""
    with pytest.raises(remote.NotInstalled):
        remote.stop(remote.Host(LocalTransport(), "/no/such/python", h.run_dir), ["w"], grace_s=1)


def test_a_command_over_ssh_returns_all_it_printed(ssh_hosts, client_key, ssh_options):
    """sshd may send a command's exit status before the last of its output (CI: a metrics file
    read with cat came back cut mid-line); the output is whole only at EOF. 100 commands whose
    output ends as they exit, at sizes around the SSH window (the old read failed 3 runs of 4)."""
    t = SSHTransport(ssh_hosts[0].address, port=ssh_hosts[0].port, identity_file=str(client_key),
                     options=ssh_options)
    try:
        for n in range(100):
            size = 1000 + 37_000 * n
            got = len(t.run(["head", "-c", str(size), "/dev/zero"], timeout=60).stdout)
            assert got == size, f"command {n}: {got} of {size} bytes"
    finally:
        t.close()


def test_over_ssh(ssh_hosts, client_key, ssh_options, tmp_path):
    t = SSHTransport(ssh_hosts[0].address, port=ssh_hosts[0].port, identity_file=str(client_key),
                     options=ssh_options)
    h = remote.Host(t, sys.executable, str(tmp_path / "ssh-run"))
    try:
        remote.install(h, harness_bundle())
        info = remote.start(h, [{"task": "chief-0", "argv": SLEEPER, "env": {}}], wait_s=20, settle_s=0)
        assert info["chief-0"].state in ("running", "starting")
        (tmp_path / "up.bin").write_bytes(b"\x00\xffbinary\n")
        remote.push_file(h, tmp_path / "up.bin", "job/data.bin")
        remote.fetch_file(h, "job/data.bin", tmp_path / "down.bin")
        assert (tmp_path / "down.bin").read_bytes() == b"\x00\xffbinary\n"
        assert remote.stop(h, ["chief-0"], grace_s=5) == {"chief-0": []}
        assert remote.status(h, ["chief-0"])["chief-0"].state == "exited"
    finally:
        t.close()


def test_a_run_folder_with_an_older_consoles_copy_is_named_not_a_traceback(tmp_path):
    """A run folder laid out by an older console (RUN/harness/, RUN/lib/tfconsole/, no entry):
    one HostError naming the host and the folder, saying what to do."""
    run = tmp_path / "old-run"
    (run / "lib" / "tfconsole").mkdir(parents=True)
    (run / "harness").mkdir()
    (run / "harness" / "hostctl.py").write_text("raise SystemExit('the old protocol')\n")
    h = remote.Host(LocalTransport("old-host"), sys.executable, str(run))
    with pytest.raises(HostError) as err:
        remote.status(h, ["worker-0"])
    message = str(err.value)
    assert message.startswith("old-host: the run folder") and "another console version" in message, message
    assert "Start a new run" in message and "Traceback" not in message
