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

from backend.access import audit, identity, roles  # noqa: E402


def timed(fn, run, n: int) -> list[float]:
    out = []
    for _ in range(n):
        start = time.perf_counter()
        fn(run)
        out.append((time.perf_counter() - start) * 1000)
    return out


def _signed_in(root: Path, recorded, run, n: int) -> list[float]:
    """As a signed-in console's action: the person comes from the session's claims through the
    resolver (console/ui/signin.py's ``session_identity`` less Streamlit's dict copy), whose
    sign-in age is checked against the roles file's session_hours, read again."""
    from console import signin
    claims = {"is_logged_in": True, "email": "user7@example.org", "iat": time.time(), "provider": "default"}

    def resolve():
        if signin.too_old(claims, roles.load(root).session_hours):
            return None
        return signin.identity_of(claims, "10.0.0.5")
    run.state.owner = {"name": "user7@example.org", "via": "console", "host": "10.0.0.5"}
    identity.set_resolver(resolve)
    token = identity._ACTING.set(None)   # outside acting_as: the resolver answers
    try:
        return timed(recorded, run, n)
    finally:
        identity._ACTING.reset(token)
        identity.set_resolver(None)


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
        signed_in = _signed_in(root, recorded, run, a.actions)
        lines = len(audit.read(root)[0])
    print(f"{a.actions} actions each; milliseconds an action (median / p99)")
    for name, values in (("bare", bare), ("audit line, no roles file", no_roles),
                         ("audit line + roles file (221 entries)", with_roles),
                         ("signed in (claims -> identity, age) + both", signed_in)):
        values = sorted(values)
        print(f"{name:>40}: {statistics.median(values):7.3f} / {values[int(len(values) * 0.99)]:7.3f}")
    print(f"audit lines written: {lines}")


if __name__ == "__main__":
    main()
