"""Runs page: lists runs, makes one current, compares two; empty folder says what to do."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from console import runs_view


def test_empty_runs_folder(page):
    at = page("runs")
    assert not at.exception
    assert any("No run" in i.value for i in at.info)


def test_list_and_make_current(on_finished):
    open_page, run_id = on_finished
    at = open_page("runs", run_id="someone-else")
    assert not at.exception
    table = at.dataframe[0].value
    assert run_id in list(table["run"])
    assert table.loc[table["run"] == run_id, "phase"].item() == "finished"
    at.button(key="runs_select").click().run()
    assert not at.exception
    assert at.session_state["run_id"] == run_id
    assert any("now the current run" in s.value for s in at.success)


def test_an_ended_runs_goodput_is_a_sortable_column_and_its_split_adds_up(on_finished):
    """The finished demo run: its goodput % on the Runs table is the share ``tfconsole goodput``
    computes (a number, so the column sorts), and Compare's split of it adds up to 100 %."""
    from backend.runs import goodput
    from backend.runs.store import RunStore
    open_page, run_id = on_finished
    at = open_page("runs")
    assert not at.exception
    table = at.dataframe[0].value
    shown = table.loc[table["run"] == run_id, "goodput %"].item()
    store = RunStore(Path(os.environ["TFCONSOLE_RUNS"]))   # where on_finished points the pages
    found = goodput.here(store.load(run_id), store.path(run_id))
    assert found.share is not None and 0 < shown < 100 and shown == round(100 * found.share, 1)
    split = runs_view.goodput_split(store, [run_id])
    assert sum(row[run_id] for row in split) == pytest.approx(100, abs=0.5)
    assert [row["cause"] for row in split if row[run_id] > 0][:1]   # some cause has time


def test_metrics_read_back_from_the_local_mirror(tmp_path):
    mirror = tmp_path / "watch_mirror"
    mirror.mkdir()
    lines = [f'{{"task":"worker-{w}","step":{s},"attempt":1,"loss":{1.0 / s},"global_loss":{1.0 / s}}}'
             for s in (1, 2, 3) for w in (0, 1)]
    (mirror / "metrics.jsonl").write_text("\n".join(lines) + "\nnot json\n")
    store = runs_view.load_metrics(tmp_path)
    assert store.tasks() == ["worker-0", "worker-1"]
    assert list(store.global_loss()[0]) == [1, 2, 3]


def _saved_run(run_id: str, created: float, phase, owner: dict | None = None) -> None:
    """A run record only (no process): enough for the Runs page and ``current_run``."""
    import sys
    from backend.runs.store import RunStore
    from backend.records.state import Attempt, RunState, TaskState
    from backend.config.spec import cluster_to_dict, default_cluster
    store = RunStore()
    store.reserve(run_id)
    store.save(RunState(run_id, created, cluster_to_dict(default_cluster(sys.executable)),
                        {"kind": "command", "command": ["true"]},
                        [TaskState("chief-0", 0, "localhost", f"tfconsole/{run_id}")],
                        [Attempt(1, created)], phase=phase, owner=owner))


def test_an_older_run_made_current_stays_current_while_a_newer_one_is_live(page):
    from backend.records.state import Phase
    _saved_run("old-run", 1000.0, Phase.FINISHED)
    _saved_run("new-run", 2000.0, Phase.RUNNING)
    at = page("runs")
    at.selectbox(key="runs_pick").set_value("old-run").run()
    at.button(key="runs_select").click().run()
    assert not at.exception
    assert any("Run old-run is now the current run (finished)" in s.value for s in at.success)
    at.run()                                                    # any later rerun, any page
    assert at.session_state["run_id"] == "old-run"
    assert any("Current run: old-run." in c.value for c in at.caption)


def test_two_runs_compared_show_what_differs_above_their_loss(page):
    """Issue 31 item 2: the Runs page shows what a run ran, and what two runs differ in."""
    from backend.runs import record
    from backend.runs.store import RunStore
    from tests.unit.test_record import CODE_A, CODE_B, HOSTS_A, HOSTS_B, saved_run
    store = RunStore()
    saved_run(store, "run-a", params={"lr": 0.1, "epochs": 2}, host="h1", code=CODE_A, hosts=HOSTS_A,
              packages=["numpy==2.0.1"])
    saved_run(store, "run-b", params={"lr": 0.2, "epochs": 2}, host="h1", code=CODE_B, hosts=HOSTS_B,
              packages=["numpy==2.0.1"])
    record.write(store.path("run-a"), {**record.read(store.path("run-a")),
                                       "git": {**CODE_B["git"], "diff": "-lr = 0.1\n+lr = 0.2\n"}})
    at = page("runs")
    at.selectbox(key="compare_a").set_value("run-a").run()
    at.selectbox(key="compare_b").set_value("run-b").run()
    at.selectbox(key="runs_pick").set_value("run-a").run()
    assert not at.exception
    assert "module sha256: " + "a" * 64 in at.code[0].value          # what run-a ran
    assert "+lr = 0.2" in at.code[1].value                             # its uncommitted diff
    table = at.dataframe[1].value                                      # below the runs table
    got = {(w, i): (x, y) for w, i, x, y in table[["what", "item", "A", "B"]].itertuples(index=False)}
    assert got[("parameters", "lr")] == ("0.1", "0.2")
    assert got[("versions", "chief-0.tensorflow")] == ("2.18.0", "2.19.0")
    assert ("code", "module sha256") in got and ("parameters", "epochs") not in got
    assert any("difference(s) between run-a (A) and run-b (B)" in c.value for c in at.caption)
    at.selectbox(key="compare_b").set_value("run-a").run()             # a run against itself
    assert any("Same parameters, hosts, versions and code." in i.value for i in at.info)


def _mirror(store, run_id: str, val_accuracy: list[float]) -> None:
    """What a console copied of a run's metric lines: an epoch-end validation line per value."""
    import json
    mirror = store.path(run_id) / "watch_mirror"
    mirror.mkdir(parents=True, exist_ok=True)
    lines = []
    for epoch, acc in enumerate(val_accuracy, 1):
        for task in ("chief-0", "worker-1"):
            lines.append({"task": task, "step": 10 * epoch, "attempt": 1, "time": 100.0 + epoch,
                          "loss": 1.0 / epoch, "global_loss": 1.0 / epoch,
                          "metrics": {"val_accuracy": acc}, "global": {"val_accuracy": acc}})
    (mirror / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))


def test_the_runs_table_answers_which_run_is_best_by_val_accuracy_and_compares_it(page):
    """Issue 34 item 6: last and best of every metric per run; any metric's curves compared."""
    from backend.runs.store import RunStore
    from backend.records.state import Phase
    _saved_run("run-low", 1000.0, Phase.FINISHED)
    _saved_run("run-high", 2000.0, Phase.FINISHED)
    store = RunStore()
    _mirror(store, "run-low", [0.5, 0.7, 0.6])
    _mirror(store, "run-high", [0.6, 0.9, 0.8])
    at = page("runs")
    assert not at.exception
    table = at.dataframe[0].value.set_index("run")
    assert table.loc["run-high", "best val_accuracy"] == 0.9 and table.loc["run-high", "val_accuracy"] == 0.8
    assert table.sort_values("best val_accuracy", ascending=False).index[0] == "run-high"
    at.selectbox(key="compare_metric").set_value("val_accuracy").run()
    assert not at.exception
    chart = at.get("plotly_chart")[0].proto.spec
    assert '"run-low"' in chart and '"run-high"' in chart and '"val_accuracy"' in chart


def test_the_runs_table_shows_owners_and_filters_mine(page):
    """Issue 48: who started each run, and "Only runs I started" for the person at the console
    (here the OS user who runs it, as the token holder is)."""
    from backend.access import identity
    from backend.records.state import Phase
    me = identity.local("console").as_dict()
    _saved_run("mine", 1000.0, Phase.FINISHED, owner=me)
    _saved_run("theirs", 2000.0, Phase.FINISHED, owner={"name": "alice@example.org", "via": "console", "host": "x"})
    _saved_run("older", 500.0, Phase.FINISHED)   # from before owners: no owner recorded
    at = page("runs")
    table = at.dataframe[0].value
    assert dict(zip(table["run"], table["owner"])) == {"mine": me["name"], "theirs": "alice@example.org", "older": ""}
    at.toggle(key="runs_mine").set_value(True).run()
    assert not at.exception
    assert list(at.dataframe[0].value["run"]) == ["mine"]


REPORTS = ("import tfconsole\n"
           "for s in range(1, 7): tfconsole.report(s, loss=1.0 / s, metrics={'val_accuracy': s / 10})")


def test_a_run_that_ended_unwatched_shows_its_metrics_on_runs_and_compare(local_cluster, python_path, runs_dir):
    """Two runs launched from a script, never opened on Monitor (a sweep's trials, a CLI launch):
    when they end, the chief's metric lines are kept in each run's folder, so the Runs table and
    Compare show them. Checked against the chief's own metrics.jsonl on its host."""
    from backend.config.spec import job_from_dict
    from backend.runs import launcher
    from backend.runs.store import RunStore
    from backend.watch import chief_metrics, summary
    from tests.app.conftest import open_page
    store = RunStore()
    ids = []
    for lr in ("0.1", "0.2"):
        job = job_from_dict({"kind": "command", "command": [python_path, "-c", REPORTS, lr]})
        run = launcher.launch(local_cluster, job, store=store, preflight=launcher.Preflight.SKIP)
        run.wait(timeout=60)
        assert run.state.phase == "finished"
        chief = Path(run.state.chief.remote_run_dir) / "metrics.jsonl"   # the independent record
        assert (store.path(run.run_id) / chief_metrics.KEPT).read_bytes() == chief.read_bytes()
        assert not (store.path(run.run_id) / summary.MIRROR_DIR).exists()   # Monitor never copied it
        ids.append(run.run_id)
    at = open_page("runs")
    assert not at.exception
    table = at.dataframe[0].value.set_index("run")
    for run_id in ids:
        assert table.loc[run_id, "loss"] == pytest.approx(1 / 6)
        assert table.loc[run_id, "best val_accuracy"] == pytest.approx(0.6)
    at.selectbox(key="compare_metric").set_value("val_accuracy").run()
    assert not at.exception
    assert not any("recorded locally" in w.value for w in at.warning)
    assert len(at.get("plotly_chart")[-1].proto.spec) > 0
