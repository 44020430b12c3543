"""What the roles check and the audit line add to one action (issue 48; target under 100 ms).

Side by side in one run: the same `save_now`-shaped action on a fake run (it only returns), bare,
and wrapped by `audit.recorded` with and without a roles file in the runs folder. The roles file
is read at each action (a person removed or downgraded loses access at their next request), so
its size is part of the figure: 200 users and 20 groups here. Pure Python, no host.

    .venv/bin/python bench/access_cost.py [--actions 2000]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backend.access import audit, identity  # noqa: E402


def timed(fn, run, n: int) -> list[float]:
    out = []
    for _ in range(n):
        start = time.perf_counter()
        fn(run)
        out.append((time.perf_counter() - start) * 1000)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--actions", type=int, default=2000)
    a = p.parse_args()
    me = identity.local("console")
    with tempfile.TemporaryDirectory() as tmp, identity.acting_as(me):
        root = Path(tmp) / "runs"
        (root / "r1").mkdir(parents=True)
        run = SimpleNamespace(run_id="r1", local_dir=root / "r1", state=SimpleNamespace(owner=me.as_dict()))

        def action(run):
            return None
        recorded = audit.recorded("save_now")(action)
        bare = timed(action, run, a.actions)
        no_roles = timed(recorded, run, a.actions)
        users = "".join(f"  user{n}@example.org: operator\n" for n in range(200))
        groups = "".join(f"  group{n}: viewer\n" for n in range(20))
        (root / "roles.yaml").write_text(f"users:\n  {me.name}: operator\n{users}groups:\n{groups}default: viewer\n")
        with_roles = timed(recorded, run, a.actions)
        lines = len(audit.read(root)[0])
    print(f"{a.actions} actions each; milliseconds an action (median / p99)")
    for name, values in (("bare", bare), ("audit line, no roles file", no_roles),
                         ("audit line + roles file (221 entries)", with_roles)):
        values = sorted(values)
        print(f"{name:>40}: {statistics.median(values):7.3f} / {values[int(len(values) * 0.99)]:7.3f}")
    print(f"audit lines written: {lines}")


if __name__ == "__main__":
    main()
