"""Checkpoint operations on one host, for the console: ``python ckpt_tool.py COMMAND ...``.
Standard library only; the console runs it with an argv list (no shell).

  list DIR                                  checkpoints users may pick (retention keeps them)
  pin DIR --step S|latest --purpose P [--ttl SECONDS]   hold a step; prints the hold and its step
  release DIR --hold ID                     end a hold
  abandon DIR --after S --tag TAG [--keep-hold ID]      move newer checkpoints aside
  abandoned DIR                             checkpoints moved aside by restores
  resumed RUN --attempt N --task T ...      the step each task resumed from in attempt N

Prints JSON on stdout. A refusal prints ``CKPT REFUSED: <why>`` on stderr and exits 2.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import layout  # noqa: E402
import retention  # noqa: E402


def _step(text: str) -> int | None:
    return None if text == "latest" else int(text)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    for name in ("list", "abandoned"):
        sub.add_parser(name).add_argument("dir")
    s = sub.add_parser("pin")
    s.add_argument("dir")
    s.add_argument("--step", type=_step, required=True)
    s.add_argument("--purpose", required=True)
    s.add_argument("--ttl", type=float, default=None, help="seconds; none: held until released")
    s = sub.add_parser("release")
    s.add_argument("dir")
    s.add_argument("--hold", required=True)
    s = sub.add_parser("abandon")
    s.add_argument("dir")
    s.add_argument("--after", type=int, required=True)
    s.add_argument("--tag", required=True)
    s.add_argument("--keep-hold", default=None)
    s = sub.add_parser("resumed")
    s.add_argument("dir")
    s.add_argument("--attempt", type=int, required=True)
    s.add_argument("--task", action="append", default=[])
    return p.parse_args(argv)


def resumed(run_dir: str, attempt: int, tasks: list[str]) -> dict:
    """``resumed``: task -> step for the tasks that restored in ``attempt`` (session.py writes
    it); ``ended``: tasks whose process has exited (spawn.py clears that file at each start)."""
    out: dict = {"resumed": {}, "ended": []}
    for task in tasks:
        if os.path.exists(layout.task_file(run_dir, task, "exit")):
            out["ended"].append(task)
        try:
            with open(layout.task_file(run_dir, task, "resumed")) as fh:
                info = json.load(fh)
        except (OSError, ValueError):
            continue
        if info.get("attempt") == attempt:
            out["resumed"][task] = info["step"]
    return out


def run(a) -> object:
    if a.command == "list":
        return retention.listed(a.dir)
    if a.command == "pin":
        return retention.pin(a.dir, a.step, purpose=a.purpose, ttl_s=a.ttl)
    if a.command == "release":
        return {"released": retention.release(a.dir, a.hold)}
    if a.command == "abandon":
        return {"moved": retention.abandon(a.dir, a.after, a.tag, keep_hold=a.keep_hold)}
    if a.command == "abandoned":
        return retention.list_abandoned(a.dir)
    return resumed(a.dir, a.attempt, a.task)


def main(argv=None) -> int:
    a = parse_args(argv)
    try:
        out = run(a)
    except (retention.HoldError, OSError) as exc:
        print(f"CKPT REFUSED: {exc}", file=sys.stderr, flush=True)
        return 2
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
