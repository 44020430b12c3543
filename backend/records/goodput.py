"""Goodput: where a run's task-seconds went (docs/goodput.md has the definition and arithmetic).

Pure: the run's record (its attempts: when each started and ended on the console's clock, the
step each resumed from, where each ran) and the chief's metric lines (attempt, step, time on
the chief's host clock) in, a ``Goodput`` out. No clock, no I/O: a live run's end is ``now``,
given by the caller. Every interval is a difference of two times on one clock; the only
cross-clock step splits an attempt's time outside its training window between start-up and end
(their sum is exact), so a skewed clock moves seconds between those two, never into goodput.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

# The causes, in the order a run meets them; their seconds add up to the run's task-seconds.
LAUNCH = "launch"                # Start to the first attempt's start: preflight, shipping files
QUEUED = "queued"                # attempt start until its scheduler started the tasks (Slurm pending)
STARTUP = "start-up"             # then to its first sync point: processes, TensorFlow, the first step
TRAINING = "training kept"       # sync points' steps whose progress a later attempt kept: the goodput
INPUT = "input wait"             # inside the kept steps: the slowest worker waiting for its next batch
LOST = "steps lost"              # trained, then thrown away by a restart from an older checkpoint
SAVES = "checkpoint saves"       # inside the training window: the chief stood still while it saved
VALIDATION = "validation"        # inside the training window: the chief validated
END = "end of attempt"           # last sync point to the attempt's end: final save, stop, a failure's detection
RESTART = "restart"              # one attempt's end to the next one's start: stop, back-off, launch again
UNREPORTED = "unreported"        # attempts with no metric line: what they did is not known
UNACCOUNTED = "unaccounted"      # the rest: clocks that disagree (clamped intervals)
CAUSES = (LAUNCH, QUEUED, STARTUP, TRAINING, INPUT, SAVES, VALIDATION, LOST, END, RESTART, UNREPORTED, UNACCOUNTED)


@dataclass(frozen=True)
class Point:
    """One sync point of the chief's metric lines: its attempt, step and time (chief's clock)."""
    attempt: int
    step: int
    time: float
    save_s: float = 0.0          # seconds the chief stood still saving since its previous line
    val_s: float = 0.0           # and validating (the line's ``blocked``)
    input_share: float = 0.0     # the slowest worker's share of that interval spent waiting for input


@dataclass(frozen=True)
class AttemptCost:
    number: int
    tasks: int
    seconds: float               # task-seconds from its start to its end
    kept_s: float                # of which training kept
    lost_steps: int = 0          # steps it trained that the next attempt threw away
    lost_s: float = 0.0
    text: str = ""               # what its restart cost, in words ("" for none)


@dataclass(frozen=True)
class Goodput:
    total_s: float               # task-seconds: wall-clock from Start to the end, times the tasks
    causes: dict = field(default_factory=dict)   # cause -> task-seconds, every cause in CAUSES
    attempts: tuple = ()
    reported: bool = True        # False: no attempt wrote a metric line (goodput cannot be known)

    @property
    def share(self) -> float | None:
        """Training kept over the whole; None for a run of no time or with nothing reported."""
        if not self.total_s or not self.reported:
            return None
        return self.causes[TRAINING] / self.total_s

    def as_dict(self) -> dict:
        return {"total_s": self.total_s, "goodput": self.share, "reported": self.reported,
                "causes": dict(self.causes),
                "attempts": [dict(vars(a)) for a in self.attempts]}


def _tasks(attempt, default: int) -> int:
    return len(attempt.hosts) if attempt.hosts else default


def account(state, points: list[Point], now: float) -> Goodput:
    """Where the task-seconds of the run ``state`` (a ``RunState``) went, from the chief's
    sync ``points``; a live run's current attempt ends at ``now`` (the console's clock)."""
    causes = dict.fromkeys(CAUSES, 0.0)
    attempts = list(state.attempts)
    if not attempts:
        return Goodput(0.0, causes, (), reported=False)
    default = len(state.tasks)
    by_attempt: dict[int, list[Point]] = {}
    for p in points:
        by_attempt.setdefault(p.attempt, []).append(p)
    causes[LAUNCH] = max(0.0, attempts[0].started - state.created) * _tasks(attempts[0], default)
    costs = []
    for i, a in enumerate(attempts):
        n = _tasks(a, default)
        ended = a.ended if a.ended is not None else now
        span = max(0.0, ended - a.started)
        nxt = attempts[i + 1] if i + 1 < len(attempts) else None
        if nxt is not None:
            causes[RESTART] += max(0.0, nxt.started - ended) * _tasks(nxt, default)
        pts = sorted(by_attempt.get(a.number, []), key=lambda p: (p.time, p.step))
        # The scheduler's hold: from the attempt's start to when a reader saw its tasks started
        # (both on the console's clock).
        queued = min(span, max(0.0, a.dequeued - a.started)) if getattr(a, "dequeued", None) else 0.0
        causes[QUEUED] += queued * n
        if not pts:
            causes[UNREPORTED] += (span - queued) * n
            costs.append(AttemptCost(a.number, n, span * n, 0.0))
            continue
        first, last = pts[0], pts[-1]
        window = min(span - queued, max(0.0, last.time - first.time))
        # Start-up and end share what lies outside the queue and the window; the split reads two clocks.
        startup = min(span - queued - window, max(0.0, first.time - a.started - queued))
        causes[STARTUP] += startup * n
        causes[END] += (span - queued - window - startup) * n
        trained = max(0, last.step - first.step)
        # What the lines after the first say the chief stood still for (the first one's
        # blocked time lies before the window); every task waits for the chief at the next sync.
        saves = sum(p.save_s for p in pts[1:])
        vals = sum(p.val_s for p in pts[1:])
        if saves + vals > window:   # clamped: a window is never less than nothing
            saves, vals = (saves * window / (saves + vals), vals * window / (saves + vals))
        stepping = window - saves - vals
        kept_until = nxt.resume_step if nxt is not None and nxt.resume_step is not None else None
        lost_steps = 0 if kept_until is None else max(0, last.step - max(kept_until, first.step))
        step_s = stepping / trained if trained else 0.0
        lost = min(stepping, lost_steps * step_s)
        # Input wait is part of a step's time: what was lost loses its wait too, and the kept
        # steps' share of it is the waited seconds' share of all stepping.
        waited = min(stepping, sum(p.input_share * max(0.0, p.time - q.time) for q, p in zip(pts, pts[1:])))
        kept = stepping - lost
        input_s = kept * waited / stepping if stepping > 0 else 0.0
        causes[SAVES] += saves * n
        causes[VALIDATION] += vals * n
        causes[LOST] += lost * n
        causes[INPUT] += input_s * n
        causes[TRAINING] += (kept - input_s) * n
        costs.append(AttemptCost(a.number, n, span * n, (kept - input_s) * n, lost_steps, lost * n))
    # What a restart threw away is its cost: told on the attempt that resumed.
    for i in range(1, len(costs)):
        before, a = costs[i - 1], attempts[i]
        if before.lost_steps:
            costs[i] = AttemptCost(**{**vars(costs[i]), "text": (
                f"attempt {a.number} lost {before.lost_steps} steps ({before.lost_s / before.tasks:.0f} s x "
                f"{before.tasks} tasks): it resumed from step {a.resume_step}, attempt {before.number} had "
                f"reached {before.lost_steps + a.resume_step}")})
    total = causes[LAUNCH] + causes[RESTART] + sum(c.seconds for c in costs)
    # By construction the causes cover the whole; a clamped interval (a clock that went back)
    # is what "unaccounted" holds.
    causes[UNACCOUNTED] = max(0.0, total - sum(v for k, v in causes.items() if k != UNACCOUNTED))
    return Goodput(total, causes, tuple(costs), reported=bool(by_attempt))


def points_from_lines(lines) -> list[Point]:
    """The chief's sync points from parsed metric lines (``metric_line.parse`` results, one
    per worker per sync point): one point per (attempt, step), at the first time written."""
    return list(fold_points({}, lines).values())


def fold_points(seen: dict, lines) -> dict:
    """``seen`` ((attempt, step) -> Point) with ``lines``' sync points added, for a reader that
    reads a run's lines as they grow: each point at the first time written, with the slowest
    worker's input wait (every step's all-reduce waits for that worker's batch)."""
    for line in lines:
        if line is None or not math.isfinite(line.time):
            continue
        key = (int(line.attempt or 0), int(line.step))
        wait = getattr(line, "input_wait", math.nan)
        wait = wait if math.isfinite(wait) else 0.0
        old = seen.get(key)
        if old is None or line.time < old.time:
            blocked = getattr(line, "blocked", None) or {}
            seen[key] = Point(key[0], key[1], float(line.time), float(blocked.get("save", 0.0)),
                              float(blocked.get("validation", 0.0)), max(wait, old.input_share if old else 0.0))
        elif wait > old.input_share:
            seen[key] = replace(old, input_share=wait)
    return seen


def unrun_cost(g: Goodput, steps_run: int | None, planned: int | None) -> float | None:
    """Task-seconds the steps a run did not run (``planned - steps_run``) would have cost at its
    own pace: its in-window seconds (training kept, input wait, saves, validation, steps lost)
    per step run. What a sweep saved by pruning it; None where either count is not known."""
    if planned is None or not g.reported or not steps_run or steps_run <= 0:
        return None
    if planned <= steps_run:
        return 0.0
    in_window = sum(g.causes.get(k, 0.0) for k in (TRAINING, INPUT, SAVES, VALIDATION, LOST))
    return in_window / steps_run * (planned - steps_run)


def summary(g: Goodput) -> str:
    """One line for a terminal or a page: the share and the largest causes of badput."""
    if not g.reported:
        return "goodput: not known (no attempt reported a step: the job writes no metric lines)"
    bad = sorted(((v, k) for k, v in g.causes.items() if k != TRAINING and v > 0), reverse=True)[:3]
    parts = ", ".join(f"{k} {v / g.total_s:.0%}" for v, k in bad)
    return f"goodput {g.share:.0%} of {g.total_s:.0f} task-seconds" + (f"; badput: {parts}" if parts else "")
