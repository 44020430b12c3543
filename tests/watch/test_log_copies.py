"""The local copies of a run's logs keep the promise of docs/reliability.md (issue 35): 4 KiB a
line and about 4 MiB a task, saying what was cut. A job that printed 1 MB lines left 40 MB
copies after a stop, and the live copier copied every byte."""
from __future__ import annotations

import re
import sys
from pathlib import Path

from backend.config.spec import cluster_from_dict, job_from_dict
from backend.runs import launcher
from backend.runs.store import RunStore
from backend.watch.logcopy import COPY_MAX, LINE_MAX, LogCopier, cut_lines
from tests.conftest import wait_for
from rig.sshd import free_port

SHORT = 60_000   # numbered 100-byte lines after the long ones: 6 MB, past COPY_MAX on their own
JOB = f"""import signal, sys, time
signal.signal(signal.SIGINT, signal.SIG_DFL)   # the stop's INT ends it with no traceback in the log
out = sys.stdout
for i in range(40):
    out.write("p" * 1_000_000 + "\\n")      # a progress bar written to a file
for i in range({SHORT}):
    out.write(f"line {{i:06d}} " + "s" * 87 + "\\n")
out.write("done\\n")
out.flush()
time.sleep(120)
"""


def test_a_line_cut_across_reads_is_cut_once_with_its_whole_count():
    text = ("é" * 3000 + "\n").encode() + b"short\n" + b"y" * 5000   # the last line still growing
    kept, seen = b"", 0
    for i in range(0, len(text), 1000):
        part, seen = cut_lines(text[i:i + 1000], seen)
        kept += part
    part, seen = cut_lines(b"y\n", seen)
    lines = (kept + part).decode().split("\n")   # the cut splits no character: this decodes
    assert lines[0] == "é" * 2048 + f" ... [cut {6000 - LINE_MAX} bytes]"
    assert lines[1:] == ["short", "y" * LINE_MAX + f" ... [cut {5001 - LINE_MAX} bytes]", ""]


def _check(copy: bytes) -> list[bytes]:
    lines = copy.split(b"\n")
    assert len(copy) <= COPY_MAX + 1024, len(copy)
    assert all(len(line) <= LINE_MAX + 40 for line in lines)
    assert lines[0].startswith(b"... [cut ") and b"earlier bytes" in lines[0]
    assert lines[-2:] == [b"done", b""]
    numbers = [int(m.group(1)) for m in re.finditer(rb"^line (\d{6}) ", copy, re.M)]
    assert numbers == list(range(numbers[0], SHORT)) and numbers[0] > 0   # no gap, no repeat
    return lines


def test_the_live_copy_and_the_copy_at_stop_are_bounded(tmp_path):
    job_file = tmp_path / "spam.py"
    job_file.write_text(JOB)
    # worker-1 in another run folder: the chief's watch agent cannot see it, the copier copies it
    cluster = cluster_from_dict({"tasks": [
        {"role": "worker", "host": "127.0.0.1", "transport": "local", "tf_port": free_port(),
         "python": sys.executable, "workdir": str(tmp_path / f"host{i}")} for i in range(2)]})
    run = launcher.launch(cluster, job_from_dict({"kind": "command", "command": [str(job_file)]}),
                          store=RunStore(tmp_path / "runs"))
    copier = LogCopier(run)
    try:
        assert copier.tasks == ["worker-1"]
        host_log = Path(run.state.tasks[1].remote_run_dir) / "logs" / "worker-1.log"
        copy = run.local_dir / "logs" / "worker-1.log"
        while not (copy.exists() and copy.read_bytes().endswith(b"done\n")):
            copier.copy_once()
            assert not copier.errors, copier.errors
            assert not copy.exists() or copy.stat().st_size <= COPY_MAX + LINE_MAX + 1024
        assert host_log.stat().st_size > 45_000_000
        lines = _check(copy.read_bytes())
        assert lines[1].endswith(f" ... [cut {1_000_000 - LINE_MAX} bytes]".encode()) or \
            lines[1].startswith(b"line ")
    finally:
        copier.stop()
        run.stop(grace_s=1)
    # The copies Run.mirror_logs keeps when the run ends; after a stop they come off its path
    # (backend.runs.aftercare), so a moment later.
    wait_for(lambda: (run.local_dir / "logs" / "worker-0.log").exists(), 120, "worker-0's copy")
    for task in ("worker-0", "worker-1"):
        _check((run.local_dir / "logs" / f"{task}.log").read_bytes())


MANY = 1_000_000   # short numbered lines: 18 MB of log (issue 47: the mirror kept every byte)
CHATTY = f"""import signal, sys, time
signal.signal(signal.SIGINT, signal.SIG_DFL)
sys.stdout.writelines(f"line {{i:07d}} ssss\\n" for i in range({MANY}))
sys.stdout.write("done\\n")
sys.stdout.flush()
time.sleep(120)
"""


def _numbers(text: str) -> list[int]:
    return [int(m.group(1)) for m in re.finditer(r"^line (\d{7}) ", text, re.M)]


def test_the_watch_mirror_of_a_chatty_job_keeps_its_newest_lines_within_the_bound(tmp_path):
    """The console's real monitor follows a job printing a million lines: its mirror stays under
    the bound, keeps the newest lines under a first line saying what was cut, and a console
    started again (replay) shows the same newest lines, none twice."""
    from backend.watch.metrics import MetricsStore
    job_file = tmp_path / "chatty.py"
    job_file.write_text(CHATTY)
    cluster = cluster_from_dict({"tasks": [
        {"role": "worker", "host": "127.0.0.1", "transport": "local", "tf_port": free_port(),
         "python": sys.executable, "workdir": str(tmp_path / "host")}]})
    run = launcher.launch(cluster, job_from_dict({"kind": "command", "command": [str(job_file)]}),
                          store=RunStore(tmp_path / "runs"))
    mirror = run.local_dir / "watch_mirror" / "logs" / "worker-0.log"
    try:
        mon = run.monitor(MetricsStore()).start()
        try:
            wait_for(lambda: mon.logs("worker-0")[-1:] == ["done"], 300, "the job's last line")
        finally:
            mon.stop()
        copy = mirror.read_bytes()
        assert len(copy) <= COPY_MAX, len(copy)
        first = copy.split(b"\n", 1)[0]
        assert first.startswith(b"... [cut ") and b"earlier bytes" in first, first
        numbers = _numbers(copy.decode())
        assert numbers == list(range(numbers[0], MANY)) and numbers[0] > 0   # the newest, once each
        assert copy.endswith(b"done\n")
        again = run.monitor(MetricsStore()).start()   # a console started again replays the mirror
        try:
            lines = wait_for(lambda: again.logs("worker-0"), 30, "the replayed lines")
            assert lines[-1] == "done" and _numbers("\n".join(lines)) == list(range(MANY - 999, MANY))
        finally:
            again.stop()
        assert mirror.read_bytes() == copy   # nothing sent twice after the replay
    finally:
        run.stop(grace_s=1)
