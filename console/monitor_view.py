"""What the monitor fragment draws, built by plain functions (testable without a browser)."""
from __future__ import annotations

import html
import math
import re
import time
from dataclasses import dataclass, field

import plotly.graph_objects as go

from backend.diagnosis import data_checks, health
from backend.diagnosis import stacks
from backend.profiles import per_step
from backend.client.harness.contract import metric_line
from backend.config.spec import RestartMode
from backend.watch import summary
from backend.watch.metrics import task_order
from console import crowd, figures
from console.chart_feed import stable_thin
from console.markdown_safe import md_escape
from console.live_run import LiveRun, Progress, progress, step_times

ERROR_LINE = re.compile(r"Traceback|Error\b|Exception\b|HARNESS FAILED|\bFATAL\b|\bCRITICAL\b|"
                        r"^E\d{4} |\bfailed\b", re.IGNORECASE)
# TensorFlow's C++ start-up chatter: kept in the raw log, hidden here on request.
NOISE = re.compile(r"^[IW]\d{4} |oneDNN custom operations|cuda_?(drivers|executor)|cuInit|"
                   r"This TensorFlow binary is optimized|rebuild TensorFlow with|"
                   r"Unable to register cu(DNN|FFT|BLAS)|computation placer already registered|"
                   r"TF-TRT Warning|absl::InitializeLog")


@dataclass
class Snapshot:
    progress: Progress
    loss: go.Figure
    step_time: go.Figure
    throughput: go.Figure
    monitor: dict = field(default_factory=dict)
    tasks: list[str] = field(default_factory=list)
    metrics: dict[str, go.Figure] = field(default_factory=dict)   # name -> chart, loss excluded
    learning_rate: go.Figure | None = None
    last_values: list[dict] = field(default_factory=list)
    outliers: list[str] = field(default_factory=list)   # past crowd.MANY workers: who stands out


def snapshot(live: LiveRun, smoothing: float = 0.0, hidden: frozenset = frozenset(),
             show: tuple = ()) -> Snapshot:
    """Everything the live panel draws; ``hidden``: metrics the operator chose not to chart;
    ``show``: workers drawn on crowded charts besides the odd ones out."""
    store = live.metrics
    steps, times = step_times(store)
    names = [n for n in figures.chart_metrics(store) if n != "loss" and n not in hidden]
    show = list(show)
    crowded = len(store.tasks()) > crowd.MANY
    gaps = absent_spans(live.run.state)   # a worker gone from an attempt: no line across its gap
    return Snapshot(progress=progress(steps, times, live.train_info() if len(steps) else None),
                    metrics={n: figures.metric_figure(store, n, smoothing, thin=stable_thin, show=show,
                                                      gaps=gaps)
                             for n in names},
                    outliers=crowd.outlier_lines(store, names=["loss", *names]) if crowded else [],
                    learning_rate=(figures.learning_rate_figure(store, thin=stable_thin)
                                   if "learning_rate" in store.metric_names()
                                   and "learning_rate" not in hidden else None),
                    last_values=last_value_rows(store),
                    loss=figures.loss_figure(store, smoothing=smoothing, thin=stable_thin, show=show, gaps=gaps),
                    step_time=figures.step_time_figure(store, thin=stable_thin, show=show, gaps=gaps),
                    throughput=figures.throughput_figure(store, thin=stable_thin, show=show, gaps=gaps),
                    monitor=(dict(live.monitor.status(), store_warning=store.warning())
                             if live.monitor else {}),
                    tasks=[t.name for t in live.run.state.tasks])


def _membership(attempt) -> dict | None:
    """Task -> host of an attempt, as its record keeps it (None: a record from before attempts
    kept their hosts, which the record reader leaves at the field's default)."""
    return attempt.hosts or None


def attempt_rows(state) -> list[dict]:
    """The attempts table: when each attempt started, the step it resumed from, the hosts its
    tasks ran on (in task order; empty for a record from before attempts kept their hosts) and
    how it ended."""
    rows = []
    for a in state.attempts:
        hosts = _membership(a) or {}
        ordered = [hosts[t] for t in sorted(hosts, key=task_order)]
        rows.append({"attempt": a.number, "started": time.strftime("%H:%M:%S", time.localtime(a.started)),
                     "resumed from step": a.resume_step, "hosts": ", ".join(dict.fromkeys(ordered)),
                     "ended": a.reason or ("running" if a.ended is None else "")})
    return rows


def absent_spans(state) -> dict[str, list[tuple[float, float]]]:
    """Task -> the step spans ``(after, up to]`` of the attempts it was not in (its host gone for
    good and the run shrunk without it; backend/runs/membership.py). An attempt owns the steps
    from its resume step up to the next attempt's (a later attempt's steps replace an earlier
    one's: backend/watch/metrics.py), the last one every step past its own."""
    attempts = list(state.attempts)
    members = [_membership(a) for a in attempts]
    if not any(members):
        return {}
    named = set().union(*(m for m in members if m))
    starts = [a.resume_step or 0 for a in attempts] + [math.inf]
    out: dict[str, list[tuple[float, float]]] = {}
    for i, hosts in enumerate(members):
        after, upto = starts[i], starts[i + 1]
        if hosts is None or upto <= after:
            continue
        for task in sorted(named - set(hosts)):
            out.setdefault(task, []).append((after, upto))
    return out


def membership_notes(state) -> tuple[str, str]:
    """(why the current attempt runs on other hosts than the one before it changed: that earlier
    attempt's reason, which names the lost host and the spare or the shrink; where each task runs
    now and which are gone, their curves ending), or ("", "") while the hosts never changed."""
    attempts = list(state.attempts)
    members = [_membership(a) for a in attempts]
    changed = [i for i in range(1, len(attempts))
               if members[i] and (attempts[i - 1].lost or members[i - 1] and members[i] != members[i - 1])]
    if not changed:
        return "", ""
    i = changed[-1]
    before, now = attempts[i - 1], attempts[i]
    why = before.reason or ", ".join(f"host {h} lost" for h in (before.lost or {}))
    info = f"Attempt {now.number} runs on other hosts than attempt {before.number}: {why}"
    hosts = _membership(attempts[-1])
    gone = sorted(set().union(*(m for m in members if m)) - set(hosts), key=task_order)
    caption = (f"Attempt {attempts[-1].number} runs on {len(hosts)} task(s): "
               + ", ".join(f"{t} on {h}" for t, h in sorted(hosts.items(), key=lambda kv: task_order(kv[0]))))
    if gone:
        ends = {t: _gone_since(spans) for t, spans in absent_spans(state).items() if spans}
        caption += ("; not in it: " + ", ".join(f"{t} (its curves end at step {ends[t]:g})" if t in ends else t
                                                for t in gone)
                    + ". Tasks are numbered as TF_CONFIG numbers the tasks of each attempt.")
    return md_escape(info), md_escape(caption)


def _gone_since(spans: list[tuple[float, float]]) -> float:
    """The step a task's curve ends at: where its last unbroken run of absent spans begins."""
    since = spans[-1][0]
    for after, upto in reversed(spans[:-1]):
        if upto != since:
            break
        since = after
    return since


def last_value_rows(store) -> list[dict]:
    """A row per worker, then one for the global values: each metric's last value (names are
    column headers: the table shows them as text)."""
    found = summary.summarize(store)
    names = [n for n in store.metric_names() if n != "learning_rate"]
    rows = [{"task": task, **{n: values.get(n) for n in names}}
            for task, values in sorted(found["workers"].items(), key=lambda kv: task_order(kv[0]))]
    if found["global"]:
        rows.append({"task": "global", **{n: (found["global"].get(n) or {}).get("last") for n in names}})
    return rows


STALE_S = 15.0   # the agent sends a heartbeat every few seconds: this much silence is news


def watch_line(status: dict, *, now: float) -> str:
    """One line on the watch stream: connected or not, and since when nothing has come."""
    state = status.get("state", "idle")
    seen = max((t for t in (status.get("last_event"), status.get("last_heartbeat")) if t), default=None)
    parts = [f"watch: {state}"]
    if seen is not None and now - seen > STALE_S:
        parts.append("no data since " + time.strftime("%H:%M:%S", time.localtime(seen)))
    if state != "connected" and status.get("last_error"):
        parts.append(md_escape(status["last_error"]))   # the agent's or a host's words: text
    if status.get("quarantined"):
        parts.append(f"{status['quarantined']} malformed metric line(s) set aside")
    if status.get("store_warning"):
        parts.append(md_escape(status["store_warning"]))
    return " — ".join(parts)


def filter_log(lines: list[str], query: str = "", *, hide_noise: bool = True,
               errors_only: bool = False, last: int = 300) -> list[str]:
    """The ``last`` lines that pass, oldest first. Read from the end: Monitor shows the newest
    300 of 1000 lines every 2 s, and the lines before them need no regex."""
    out = []
    q = query.strip().lower()
    for line in reversed(lines):
        if len(out) == last:
            break
        if hide_noise and NOISE.search(line):
            continue
        if q and q not in line.lower():
            continue
        if errors_only and not ERROR_LINE.search(line):
            continue
        out.append(line)
    return out[::-1]


def log_html(lines: list[str]) -> str:
    """A scrolling <pre> with error lines in red; every line escaped."""
    body = "\n".join(
        f'<span style="color:#b00020;font-weight:600">{html.escape(line)}</span>'
        if ERROR_LINE.search(line) else html.escape(line) for line in lines)
    return ('<pre style="max-height:360px;overflow:auto;font-size:12px;background:#f7f7f9;'
            f'padding:8px;border-radius:6px;white-space:pre-wrap">{body or "(no lines)"}</pre>')


FIRST_POINTS_FOR_S = 120.0   # an attempt with no point after this long may be a job that writes none


def waiting_for_first_points(live: LiveRun, *, now: float) -> bool:
    """Whether the live panel should look often (0.5 s) for a run's first points: a live run
    with none yet, still in preflight (no attempt recorded: Monitor is often opened right after
    Start) or in an attempt younger than FIRST_POINTS_FOR_S."""
    state = live.run.state
    if not state.live or live.metrics.progress() is not None:
        return False
    return not state.attempts or now - state.attempts[-1].started < FIRST_POINTS_FOR_S


WARN_AFTER_S = 60.0   # no step for this long is worth a line, whatever the stall timeout


def chief_now(status: dict, *, now: float) -> float | None:
    """The chief host's clock now, from its watch agent's last heartbeat (``status["chief_clock"]``:
    its time, and ours when it came) and ``now`` on our clock; None before the first heartbeat.
    A metrics line's time is the chief's: subtracting it from our clock counted a console 2 h
    ahead as 7200 s without a step, and one 2 h behind would hide a real hang for 2 h."""
    beat = status.get("chief_clock")
    if not beat:
        return None
    host_time, received = beat
    return host_time + (now - received)


def stall_warning(live: LiveRun, status: dict, *, now: float) -> str:
    """Names the worker whose step stopped advancing, and says truly what happens next: only a
    kept run (``restart: on_failure``, its keeper) with a stall timeout above 0 is stopped.
    ``status``: the watch's (``RunMonitor.status``); ``now``: our clock. Time since a step is
    measured on the chief's clock alone (``chief_now``); nothing is said before it is known."""
    host_now = chief_now(status, now=now)
    if not live.run.state.live or host_now is None:
        return ""
    restart = live.run.job.restart
    limit = restart.stall_timeout_s
    if restart.mode == RestartMode.ON_FAILURE and limit > 0:
        return stacks.stall_note(stacks.progress(live.metrics), now=host_now, stall_timeout_s=limit,
                                 warn_after_s=min(WARN_AFTER_S, limit / 2))
    behind = stacks.stalled(stacks.progress(live.metrics))
    idle = host_now - max(w.last_time for w in behind) if behind else 0.0
    if not behind or idle < WARN_AFTER_S:
        return ""
    why = ("the stall timeout is off (stall_timeout_s: 0)" if limit <= 0
           else "restart: never, so no stall timeout acts")
    return (f"No step since {idle:.0f} s: {', '.join(w.task for w in behind)} stopped at step "
            f"{behind[0].last_step}; {why}: nothing will stop it. Press Dump stacks to see where "
            "each worker is, or Stop to end the run.")


def stacks_text(found: list) -> dict[str, str]:
    """Task label -> what to show for it: its stacks, or why there are none."""
    return {f"{s.task} on {s.host}" + (" (in the job's own code)" if s.in_job_code else ""):
            s.text or f"(no stacks: {s.error})" for s in found}


def profile_rows(tasks: dict) -> list[dict]:
    """One row per task of a profile (``backend.profiles.per_step``): time per step, the op time
    split into compute, collective communication and input, and the top op types per step."""
    rows = []
    for task, summary in tasks.items():
        found = per_step(summary)
        if found is None:
            rows.append({"task": task, "ms/step": None, "compute %": None, "collective %": None,
                         "input %": None, "top ops (ms/step)": f"no profile: {summary['error']}"})
            continue
        rows.append({"task": task, "ms/step": round(found["ms_per_step"], 1),
                     **{f"{k} %": round(100 * v) for k, v in found["shares"].items()},
                     "top ops (ms/step)": ", ".join(f"{op} {ms:.2f}" for op, ms in found["top"][:4])})
    return rows


def health_error(live: LiveRun) -> str:
    """A NaN or Inf loss or other metric, the moment its metrics line arrives, with every
    worker's versions."""
    bad = dict(live.metrics.nonfinite)
    if bad:
        return health.nan_line(bad, live.task_versions())
    named = dict(live.metrics.nonfinite_metrics)
    return health.metric_nan_line(named, live.task_versions()) if named else ""


def data_notes(live: LiveRun) -> tuple[str, list[str]]:
    """(each worker's share of a step spent waiting for data, as a caption; warnings: workers
    that are input-bound, workers that read the same data), from the streamed metrics."""
    shares = live.metrics.input_wait()
    warnings = data_checks.input_bound_lines(shares)
    same = data_checks.same_data_line(live.metrics.same_data())
    return data_checks.wait_caption(shares), warnings + ([same] if same else [])


SHOWN_LEFT_OUT = 10   # names a warning lists; the task's log has them all


def left_out_warning(store) -> str:
    """What the job's line writer left out of its metrics (metric_line.LEFT_OUT), per task or
    per group of tasks that left out the same; "" when nothing."""
    groups: dict[tuple, list[str]] = {}
    for task, names in store.left_out().items():
        groups.setdefault(tuple(names), []).append(task)
    if not groups:
        return ""
    said = []
    for names, tasks in groups.items():
        more = f" and {len(names) - SHOWN_LEFT_OUT} more" if len(names) > SHOWN_LEFT_OUT else ""
        said.append(f"{', '.join(tasks)}: {', '.join(names[:SHOWN_LEFT_OUT])}{more}")
    return (f"Metrics left out of the lines (training went on): {'; '.join(said)}. A line keeps "
            f"the first {metric_line.MAX_NAMES} names that are numbers, the loss first, then in "
            "the order the script gives them; the task's log says why each was left out. To "
            "choose, report fewer metrics: pass only the ones to watch.")


def gpu_rows(samples: dict[str, list]) -> list[dict]:
    """Monitor's GPU table: per host (every host of the run, not only the chief's), each GPU's
    latest utilisation and memory, from the watch agents' nvidia-smi readings."""
    rows = []
    for host in sorted(samples):
        readings = samples[host]
        if not readings:
            continue
        for g in sorted(readings[-1][1], key=lambda g: g.get("index", 0)):
            rows.append({"host": host, "GPU": g.get("index"), "utilisation %": g.get("util"),
                         "memory used MiB": g.get("mem_used_mib"), "memory total MiB": g.get("mem_total_mib")})
    return rows


def resume_warnings(live: LiveRun) -> list[str]:
    """Attempts that were to resume from a step that not every worker confirmed restoring (a
    script that ignores the resume step), as the run's record keeps them: no host is asked."""
    from backend.runs import resume
    return resume.warnings(live.run.state)


GOODPUT_EVERY_S = 30.0   # a live run's goodput is read again at most this often (its new lines)


def goodput(live, now: float):
    """The run's goodput from this machine's copies of the chief's lines (no host is asked),
    kept for ``GOODPUT_EVERY_S`` on a live run, for good once it ended; None before any. Each
    read folds only the lines added since the last (``goodput.Following``)."""
    from backend.runs import goodput as reading
    kept = getattr(live, "_goodput", None)
    ended = not live.run.state.live
    if kept is not None and kept[2] == ended and (ended or now - kept[0] < GOODPUT_EVERY_S):
        return kept[1]
    follow = getattr(live, "_goodput_lines", None)
    if follow is None:
        follow = live._goodput_lines = reading.Following(live.run.local_dir)
    found = follow.of(live.run.state, now)
    live._goodput = (now, found, ended)
    return found
