"""``tfconsole metrics RUN``: the last value of every metric, per worker and global, and the
best global value with its step: what Monitor shows, for a terminal or a script (``--json``).

Read from the chief's metrics.jsonl (at most its last READ_BYTES: a "best" is then the best of
those lines, and the output says so), so it is as fresh as the run, with no console open.
"""
from __future__ import annotations

from backend.cli.checkpoints import _attach, print_json, print_table


def cmd_metrics(a) -> int:
    # imported here: numpy and the metric readers, for this command only (the parser of every
    # command imports this module)
    from backend.watch import summary
    from backend.watch.chief_metrics import READ_BYTES, read_store
    run = _attach(a)
    store, cut = read_store(run)
    found = summary.summarize(store)
    if a.json:
        print_json({"run_id": run.run_id, "phase": str(run.state.phase), "partial": cut, **found})
        return 0
    if found["step"] is None:
        print(f"run {run.run_id}: no metrics yet (a command job without the callback or "
              "tfconsole.report, or a run before its first step)")
        return 0
    print(f"run {run.run_id}: {run.state.phase}, step {found['step']}"
          + (f" (best of the last {READ_BYTES >> 20} MiB of lines)" if cut else ""))
    rows = [{"metric": name, "global": _fmt(v["last"]), "at step": v["last_step"],
             "best": _fmt(v["best"]), "best step": v["best_step"] if v["best_step"] is not None else ""}
            for name, v in found["global"].items()]
    if rows:
        print_table(rows, ["metric", "global", "at step", "best", "best step"])
    tasks = sorted(found["workers"])
    names = [n for n in store.metric_names() if any(n in found["workers"][t] for t in tasks)]
    if tasks and names:
        print()
        print_table([{"task": t, **{n: _fmt(found["workers"][t].get(n)) for n in names}} for t in tasks],
                    ["task", *names])
    return 0


def _fmt(value) -> str:
    return "" if value is None else f"{value:.6g}"


def add_command(add) -> None:
    s = add("metrics", cmd_metrics, "the last value of every metric per worker and global, and the "
                                    "best global value (what Monitor shows)")
    s.add_argument("run")
    s.add_argument("--json", action="store_true", help="print JSON for scripts")
