"""Read test-output/timeline.jsonl (written by tests/conftest.py): the longest tests, how busy
the machine was during each, and what the other process ran meanwhile.

    python tests/timeline.py [--top 15] [FILE]
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

DEFAULT = Path(__file__).resolve().parents[1] / "test-output" / "timeline.jsonl"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("file", nargs="?", default=str(DEFAULT))
    parser.add_argument("--top", type=int, default=15, help="how many of the longest tests to show")
    args = parser.parse_args()
    rows = [json.loads(line) for line in Path(args.file).read_text().splitlines() if line.strip()]
    t0 = min(r["start"] for r in rows)
    span = max(r["end"] for r in rows) - t0
    for r in rows:   # from when the test had its turn at the cores (older files lack turn_wait)
        r["start"] += r.get("turn_wait", 0.0)
    slow = sum(r["end"] - r["start"] for r in rows if r["slow"])
    waited = sum(r.get("turn_wait", 0.0) for r in rows)
    print(f"{len(rows)} tests over {span:.0f} s; slow tests' own time summed: {slow:.0f} s "
          f"(after {waited:.0f} s of waiting for turns)")
    for r in sorted(rows, key=lambda r: r["start"] - r["end"])[:args.top]:
        beside = [o for o in rows if o["worker"] != r["worker"]
                  and o["start"] < r["end"] and o["end"] > r["start"]]
        overlap = {o["test"].split("::")[-1][:60]: min(o["end"], r["end"]) - max(o["start"], r["start"])
                   for o in beside}
        top = sorted(overlap.items(), key=lambda kv: -kv[1])[:4]
        print(f"\n{r['end'] - r['start']:6.1f} s  cpu {r['cpu_busy']:.0%}  at {r['start'] - t0:5.0f} s  "
              f"{r['worker']}  {r['test']}")
        for name, seconds in top:
            print(f"          beside {seconds:5.1f} s  {name}")


if __name__ == "__main__":
    main()
