"""What a job can make the console hold (issue 27): long lines, the agent's byte counts and
offsets, and the metric store's task names are all bounded, and what was cut says so."""
from __future__ import annotations

import json
import re
import time

from backend.watch.metrics import MAX_TASK_NAME, MAX_TASKS, MetricsStore
from backend.watch import RunMonitor
from backend.client.harness.watch import LOG_LINE_MAX
from console.monitor_view import watch_line
from rig.watch_run import AgentProc, append, make_run
from tests.watch.test_monitor import ScriptedTransport, wait_for

LONG = 1_000_000   # a progress bar written to a file, a printed tensor: just under the agent's 1 MB


def _enc(event: dict) -> bytes:
    return json.dumps(event).encode() + b"\n"


def test_the_agent_sends_a_long_log_line_cut_with_a_marker(tmp_path):
    run = make_run(tmp_path / "run")
    append(run / "logs/chief-0.log", "x" * LONG + "\nshort line\n")
    agent = AgentProc(run)
    try:
        agent.wait(lambda: len(agent.lines("chief-0")) == 2)
        long, short = agent.lines("chief-0")
        assert short == "short line"
        assert long.startswith("x" * 100) and len(long) < LOG_LINE_MAX + 40
        assert long.endswith(f"... [cut {LONG - LOG_LINE_MAX} bytes]")
    finally:
        agent.close()


def _monitor(tmp_path, sessions, store=None, **kw):
    argvs: list = []
    mon = RunMonitor(lambda: ScriptedTransport(sessions, argvs), "/r", str(tmp_path / "l"),
                     store or MetricsStore(), backoff=(0.01, 0.01), **kw).start()
    return mon, argvs


def test_the_console_cuts_long_log_lines_an_agent_sends_and_keeps_them_cut(tmp_path):
    """An older or broken agent may send 1 MB lines: 400 of them held 600-900 MiB before."""
    line = "y" * LONG
    events = [_enc({"type": "log", "task": "chief-0", "line": line}) for _ in range(5)]
    events.append(_enc({"type": "offsets", "offsets": {"logs/chief-0.log": {"inode": 7, "offset": 5 * LONG}}}))
    mon, _ = _monitor(tmp_path, [events], log_lines=1000)
    try:
        wait_for(lambda: len(mon.logs("chief-0")) == 5, what="five lines")
        lines = mon.logs("chief-0")
        assert all(len(x) < LOG_LINE_MAX + 40 for x in lines)
        assert lines[0].endswith(f"... [cut {LONG - LOG_LINE_MAX} bytes]")
    finally:
        mon.stop()
    mirror = (tmp_path / "l" / "watch_mirror" / "logs" / "chief-0.log").stat().st_size
    assert mirror < 5 * (LOG_LINE_MAX + 40)


def test_a_metrics_header_with_an_absurd_byte_count_is_refused_not_read(tmp_path):
    """The console read as many bytes as the header said (a 1 TiB buffer asked for)."""
    events = [_enc({"type": "metrics", "lines": 1, "bytes": 1 << 40}) + b'{"task":"a","step":1}\n']
    mon, argvs = _monitor(tmp_path, [events] * 1000)   # every session: the error stays shown
    try:
        wait_for(lambda: "metrics block" in mon.status()["last_error"], what="the refusal")
        assert "1099511627776 bytes" in mon.status()["last_error"]
    finally:
        mon.stop()


def test_offsets_from_the_agent_are_checked_before_they_are_kept_and_sent_back(tmp_path):
    bogus = {f"logs/t{i}.log": {"inode": i, "offset": 1} for i in range(5000)}
    bogus.update({"../../etc/passwd": {"inode": 1, "offset": 0},
                  "logs/neg.log": {"inode": 3, "offset": -5},
                  "logs/huge.log": {"inode": 3, "offset": 1 << 70},
                  "metrics.jsonl": {"inode": 9, "offset": 12, "skip": True}})
    sessions = [[_enc({"type": "log", "task": "chief-0", "line": "a"}),
                 _enc({"type": "skipped", "file": "logs/chief-0.log", "count": 10 ** 30}),
                 _enc({"type": "offsets", "offsets": bogus})], []]
    mon, argvs = _monitor(tmp_path, sessions)
    try:
        wait_for(lambda: len(argvs) >= 2, what="a reconnect")
        resumed = json.loads(argvs[1][argvs[1].index("--offsets-json") + 1])
        assert resumed["metrics.jsonl"] == {"inode": 9, "offset": 12, "skip": True}
        assert not {"../../etc/passwd", "logs/neg.log", "logs/huge.log"} & set(resumed)
        assert len(resumed) <= 1100
        assert 0 < mon.skipped()["logs/chief-0.log"] <= 2 ** 32
    finally:
        mon.stop()


def test_the_store_bounds_distinct_task_names_and_says_what_it_dropped():
    """One new task name per metrics line cost about 40 KiB each."""
    store = MetricsStore()
    store.add_many([{"task": f"t{i}", "step": 1, "loss": 1.0} for i in range(MAX_TASKS + 500)])
    store.add_many([{"task": "w" * (MAX_TASK_NAME + 1), "step": 1, "loss": 1.0}])
    assert len(store.tasks()) == MAX_TASKS
    assert store.nbytes() < MAX_TASKS * 50_000
    note = store.warning()
    assert f"500 metric line(s) of task names past the first {MAX_TASKS} dropped" in note
    assert f"1 metric line(s) with a task name over {MAX_TASK_NAME} characters dropped" in note
    store.add_many([{"task": "t0", "step": 2, "loss": 1.0}])   # known names still go in
    assert list(store.series("t0").step) == [1, 2]


def test_monitor_status_line_shows_the_store_warning():
    line = watch_line({"state": "connected", "store_warning": "3 metric line(s) ... dropped"},
                      now=time.time())
    assert "3 metric line(s) ... dropped" in re.sub(r"\\(.)", r"\1", line)   # as shown


def test_a_copied_log_read_for_the_monitor_page_has_its_long_lines_cut(tmp_path):
    """Logs the agent cannot see are copied here (backend/watch/logcopy.py) and read from the copy."""
    from console.live_run import _last_lines
    path = tmp_path / "worker-1.log"
    path.write_text(("z" * 300_000 + "\n") * 3 + "done\n")
    lines = _last_lines(path, 1000)
    assert lines[-1] == "done"
    assert all(len(x) < LOG_LINE_MAX + 40 for x in lines)
    assert lines[-2].endswith(f"... [cut {300_000 - LOG_LINE_MAX} bytes]")
