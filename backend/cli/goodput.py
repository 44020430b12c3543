"""``tfconsole goodput RUN``: where a run's task-seconds went (docs/goodput.md): the share spent
in training steps whose progress was kept, and the rest by cause, adding up to the whole; each
restart's cost in words. ``--json`` for scripts."""
from __future__ import annotations

from backend.cli.checkpoints import _attach, print_json, print_table


def cmd_goodput(a) -> int:
    from backend.records import goodput as account   # imported here: this command only
    from backend.runs import goodput
    run = _attach(a, reads_only=True)
    found = goodput.of(run)
    if a.json:
        print_json({"run_id": run.run_id, "phase": str(run.state.phase), **found.as_dict()})
        return 0
    print(f"run {run.run_id}: {run.state.phase}; {account.summary(found)}")
    if found.total_s > 0:
        print_table([{"cause": k, "task-seconds": f"{v:.1f}", "share": f"{v / found.total_s:.1%}"}
                     for k, v in found.causes.items()], ["cause", "task-seconds", "share"])
    for cost in found.attempts:
        if cost.text:
            print(cost.text)
    return 0


def add_command(add) -> None:
    s = add("goodput", cmd_goodput, "where a run's task-seconds went: training kept, and the rest by cause")
    s.add_argument("run")
    s.add_argument("--json", action="store_true", help="print JSON for scripts")
