"""Which checkpoints a folder keeps, and the holds that actions place on them. Standard library only.

Retention keeps the last ``keep_last`` complete checkpoints, the ``keep_best`` best by one metric
(``best_metric``, global value, lowest or highest by ``best_mode``; the loss by default), and every step that an unexpired hold names. A checkpoint that falls out of the last
``keep_last`` stays on disk ``grace_s`` seconds more but is no longer listed: an action picked from
a list that is a few seconds old still finds it, and the action's pin then holds it.

A pin and a retention pass each take one lock (``flock`` on DIR/.lock), so a pin either finds the
checkpoint complete and holds it, or finds it gone; retention never deletes in between. A hold
carries an expiry, so one left by a crashed console ends by itself.
"""
from __future__ import annotations

import fcntl
import json
import os
import re
import secrets
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass

from . import ckpt_index

POLICY = "retention.json"      # written by the harness: what its retention keeps
HOLDS = "holds"                # <id>.json: {"step", "purpose", "created", "expires"}
ABANDONED = "abandoned"        # <tag>/: checkpoints a restore moved aside (newer than its step)
LOCK = ".lock"
_STEP_FILE = re.compile(rf"^{ckpt_index.PREFIX}-(\d+)\.")
_HOLD_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class HoldError(Exception):
    """A pin or a move that cannot be done; the message says which steps can be used."""


@dataclass(frozen=True)
class Policy:
    keep_last: int = 5
    keep_best: int = 0
    grace_s: float = 30.0
    best_metric: str = "loss"     # a name in the checkpoint's "metrics" (global values)
    best_mode: str = "min"        # "min" (losses) or "max" (accuracy)


def best_options(who: str, keep_best: int, best_metric: str, best_mode: str) -> dict:
    """The keep-best options of ``tfconsole.KerasCallback`` and ``tfconsole.Loop``, checked alike
    (a harness job's come from its params: jobs.py)."""
    if best_mode not in ("min", "max"):
        raise ValueError(f"{who}: best_mode is {best_mode!r}; use \"min\" (losses) or \"max\" (accuracy)")
    if int(keep_best) < 0:
        raise ValueError(f"{who}: keep_best is {keep_best}; give 0 (off) or how many best checkpoints to keep")
    return {"keep_best": int(keep_best), "best_metric": str(best_metric), "best_mode": best_mode}


def write_policy(directory: str, policy: Policy) -> None:
    os.makedirs(directory, exist_ok=True)
    ckpt_index.write_json_atomic(os.path.join(directory, POLICY), asdict(policy))


def read_policy(directory: str) -> Policy | None:
    try:
        with open(os.path.join(directory, POLICY)) as fh:
            return Policy(**json.load(fh))
    except (OSError, ValueError, TypeError):
        return None


@contextmanager
def locked(directory: str):
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, LOCK), "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def live_holds(directory: str, now: float) -> dict[str, dict]:
    """Unexpired holds by id (expired and unreadable ones are left for ``apply`` to remove)."""
    folder = os.path.join(directory, HOLDS)
    out = {}
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        try:
            with open(os.path.join(folder, name)) as fh:
                hold = json.load(fh)
        except (OSError, ValueError):
            continue
        if name.endswith(".json") and (hold.get("expires") is None or hold["expires"] > now):
            out[name[: -len(".json")]] = hold
    return out


# ---- pure choices -------------------------------------------------------------------------------
def kept(complete: list[dict], policy: Policy, held: set[int]) -> set[int]:
    """The steps retention keeps for good reason: last N, best K by loss, held."""
    steps = [c["step"] for c in complete]
    # keep_last 0 keeps every checkpoint, as CheckpointManager's max_to_keep did.
    last = set(steps[-policy.keep_last:]) if policy.keep_last > 0 else set(steps)
    return last | best(complete, policy) | (held & set(steps))


def best(complete: list[dict], policy: Policy) -> set[int]:
    """The ``keep_best`` best steps by ``best_metric`` (NaN and missing values never best)."""
    scored = [(v, c["step"]) for c in complete
              if (v := score(c, policy.best_metric)) is not None and v == v]
    scored.sort(reverse=policy.best_mode == "max")
    return {step for _, step in scored[: max(policy.keep_best, 0)]}


def score(meta: dict, metric: str) -> float | None:
    """A checkpoint's global value of ``metric`` from its metadata; checkpoints written before
    named metrics carry the loss only, as "global_loss"."""
    value = (meta.get("metrics") or {}).get(metric)
    if value is None and metric == "loss":
        value = meta.get("global_loss")
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def doomed(complete: list[dict], policy: Policy, held: set[int], now: float) -> list[int]:
    """Steps to delete now: outside ``kept`` and out of the last N for longer than the grace."""
    keep = kept(complete, policy, held)
    out = []
    for i, c in enumerate(complete):
        newer = i + policy.keep_last
        # It left the last N when the checkpoint keep_last places newer was written.
        left_at = complete[newer].get("time", 0) if newer < len(complete) else now
        if c["step"] not in keep and now - float(left_at or 0) >= policy.grace_s:
            out.append(c["step"])
    return out


# ---- actions on a folder --------------------------------------------------------------------------
def _delete_step(directory: str, step: int) -> None:
    # The meta file first: without it the checkpoint is no longer complete to any reader.
    names = sorted(n for n in os.listdir(directory) if n.startswith(f"{ckpt_index.PREFIX}-{step}."))
    names.sort(key=lambda n: not n.endswith(".meta.json"))
    for name in names:
        try:
            os.unlink(os.path.join(directory, name))
        except FileNotFoundError:
            pass


def apply(directory: str, policy: Policy, now: float | None = None) -> list[int]:
    """One retention pass (the harness runs it after each save); returns the deleted steps."""
    now = time.time() if now is None else now
    with locked(directory):
        held = {h["step"] for h in live_holds(directory, now).values()}
        _drop_expired_holds(directory, now)
        complete = ckpt_index.list_complete(directory)
        gone = doomed(complete, policy, held, now)
        for step in gone:
            _delete_step(directory, step)
        newest = complete[-1]["step"] if complete else 0
        # A save that crashed half way leaves files no index will ever complete.
        for step in ckpt_index.list_partial(directory):
            if step < newest and step not in held:
                _delete_step(directory, step)
    return gone


def _drop_expired_holds(directory: str, now: float) -> None:
    folder = os.path.join(directory, HOLDS)
    live = live_holds(directory, now)
    for name in os.listdir(folder) if os.path.isdir(folder) else []:
        if name.endswith(".json") and name[: -len(".json")] not in live:
            try:
                os.unlink(os.path.join(folder, name))
            except FileNotFoundError:
                pass


def listed(directory: str, now: float | None = None) -> list[dict]:
    """What users may pick: kept checkpoints (not those in their grace), each with its holds."""
    now = time.time() if now is None else now
    complete = ckpt_index.list_complete(directory)
    holds = live_holds(directory, now)
    policy = read_policy(directory)
    keep = kept(complete, policy, {h["step"] for h in holds.values()}) if policy else None
    out = []
    for c in complete:
        if keep is None or c["step"] in keep:
            out.append({**c, "held": sorted(h.get("purpose", "") for h in holds.values()
                                            if h["step"] == c["step"])})
    return out


def pin(directory: str, step: int | None, *, purpose: str, ttl_s: float | None) -> dict:
    """Hold ``step`` (None: the newest complete one, resolved here, under the lock)."""
    now = time.time()
    with locked(directory):
        complete = ckpt_index.list_complete(directory)
        steps = [c["step"] for c in complete]
        if not steps:
            raise HoldError(f"no complete checkpoint in {directory} yet")
        chosen = steps[-1] if step is None else int(step)
        if chosen not in steps:
            shown = [c["step"] for c in listed(directory, now)]
            raise HoldError(f"checkpoint step {chosen} is not complete in {directory} (retention "
                            f"removed it, a restore moved it aside, or its save did not finish); "
                            f"listed now: {shown}")
        hold_id = f"{int(now * 1000)}-{secrets.token_hex(4)}"
        hold = {"step": chosen, "purpose": purpose, "created": now,
                "expires": None if ttl_s is None else now + float(ttl_s)}
        os.makedirs(os.path.join(directory, HOLDS), exist_ok=True)
        ckpt_index.write_json_atomic(os.path.join(directory, HOLDS, f"{hold_id}.json"), hold)
    return {"hold": hold_id, **hold}


def release(directory: str, hold_id: str) -> bool:
    if not _HOLD_ID.match(hold_id):
        raise HoldError(f"hold id {hold_id!r} is not valid")
    try:
        os.unlink(os.path.join(directory, HOLDS, f"{hold_id}.json"))
    except FileNotFoundError:
        return False
    return True


def abandon(directory: str, after: int, tag: str, *, keep_hold: str | None = None) -> list[int]:
    """Move every checkpoint newer than ``after`` into DIR/abandoned/<tag>/ (kept, not listed)."""
    if not _HOLD_ID.match(tag):
        raise HoldError(f"tag {tag!r} is not valid")
    with locked(directory):
        busy = {h["step"]: h for i, h in live_holds(directory, time.time()).items()
                if h["step"] > after and i != keep_hold}
        if busy:
            step, hold = min(busy.items())
            raise HoldError(f"checkpoint step {step} is held by a running {hold.get('purpose')!r} "
                            f"action; wait for it to end")
        names = [n for n in os.listdir(directory) if (m := _STEP_FILE.match(n)) and int(m.group(1)) > after]
        if not names:
            return []
        target = os.path.join(directory, ABANDONED, tag)
        os.makedirs(target, exist_ok=True)
        # Meta files first: each moved checkpoint stops being complete here at once.
        for name in sorted(names, key=lambda n: not n.endswith(".meta.json")):
            os.rename(os.path.join(directory, name), os.path.join(target, name))
    return sorted({int(_STEP_FILE.match(n).group(1)) for n in names})


def list_abandoned(directory: str) -> list[dict]:
    root = os.path.join(directory, ABANDONED)
    out = []
    for tag in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        out += [{**c, "abandoned": tag} for c in ckpt_index.list_complete(os.path.join(root, tag))]
    return out
