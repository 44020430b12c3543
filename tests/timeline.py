"""Read test-output/timeline.jsonl (written by tests/conftest.py): the tests that held the cores
longest, net of waiting for their training turn, and what the other processes ran meanwhile.

pytest's own ``--durations`` counts a test's wait for its turn as its time: a test that ran
for 10 s after waiting 58 s for another process's training is listed at 68 s.

    python tests/timeline.py [--top 15] [FILE]
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

DEFAULT = Path(__file__).resolve().parents[1] / "test-output" / "timeline.jsonl"


def load(path: Path) -> list[dict]:
    """The timeline's rows, each with ``ran_from``: when it had its turn (start + turn_wait)."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    for r in rows:
        r["ran_from"] = r["start"] + r.get("turn_wait", 0.0)
    return rows


def headline(rows: list[dict]) -> str:
    span = max(r["end"] for r in rows) - min(r["start"] for r in rows)
    held = sum(r["end"] - r["ran_from"] for r in rows if r["slow"] and not r.get("waits"))
    waited = sum(r.get("turn_wait", 0.0) for r in rows)
    return (f"{len(rows)} tests over {span:.0f} s; training turns held {held:.0f} s in all; "
            f"{waited:.0f} s spent waiting for a turn")


def longest(rows: list[dict], top: int) -> list[str]:
    """The ``top`` longest tests net of their turn wait, each with what ran beside it."""
    lines = []
    for r in sorted(rows, key=lambda r: r["ran_from"] - r["end"])[:top]:
        beside = [o for o in rows if o["worker"] != r["worker"]
                  and o["start"] < r["end"] and o["end"] > r["ran_from"]]
        overlap = sorted(((min(o["end"], r["end"]) - max(o["start"], r["ran_from"]),
                           o["test"].split("::")[-1][:60]) for o in beside), reverse=True)[:3]
        lines.append(f"{r['end'] - r['ran_from']:6.1f} s (+{r.get('turn_wait', 0.0):.0f} s waiting)  "
                     f"cpu {r['cpu_busy']:.0%}  {r['test'].split('@')[0]}")
        lines += [f"           beside {seconds:5.1f} s  {name}" for seconds, name in overlap]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("file", nargs="?", default=str(DEFAULT))
    parser.add_argument("--top", type=int, default=15, help="how many of the longest tests to show")
    args = parser.parse_args()
    rows = load(Path(args.file))
    print(headline(rows))
    print("\n".join(longest(rows, args.top)))


if __name__ == "__main__":
    main()
