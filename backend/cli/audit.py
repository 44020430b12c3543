"""``tfconsole audit``: who did what to which run, from the runs folder's audit."""
from __future__ import annotations

import time

from backend.term_text import term_safe
from backend.access import audit   # its ACTIONS are the parser's --action choices


def cmd_audit(a) -> int:
    import json
    from backend.runs.store import RunStore
    root = RunStore(a.runs).root
    entries, skipped = audit.read(root)
    found = audit.matching(entries, run=a.run, user=a.user, action=a.action)
    if a.json:
        print(json.dumps({"entries": [{**e, "who": e["who"].as_dict()} for e in found], "skipped": skipped},
                         indent=1, default=str))
        return 0
    if not found:
        print(f"no audit lines{' that match' if entries else ''} in {root / audit.FILE}")
    for e in found:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e["time"]))
        args = " ".join(f"{k}={v}" for k, v in (e.get("args") or {}).items())
        print(term_safe(f"{when}  {e['who'].shown():<40}  {e['action']:<9} {e.get('run') or '-':<26} "
                        f"{e.get('outcome')}{'  ' + args if args else ''}"))
    for line in skipped:   # a damaged line is named, never hidden, and never stops the reading
        print(f"skipped {line}")
    return 0


def audit_command(add) -> None:
    s = add("audit", cmd_audit, "who launched, stopped, saved, exported or restored which run, and when")
    s.add_argument("--run", help="one run's lines")
    s.add_argument("--user", help="one person's lines (the name shown, e.g. an OS user)")
    s.add_argument("--action", choices=audit.ACTIONS, help="one kind of action")
    s.add_argument("--json", action="store_true", help="print JSON for scripts")
