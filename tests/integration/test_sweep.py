"""A sweep over real sshd hosts (issue 50): 4 trials, 2 at once, each an ordinary run on its own
host; the best trial is the one the runs' own metric files say, and nothing is left on a host.
A stopped sweep stops its running trials and leaves nothing. A complete trial counts its best
reported value (or, with ``of: last``, its last); successive halving and hyperband stop the
hopeless trials early. The job is a tiny command job (a few reports, no TensorFlow): what is
tested is the sweep's keeper, not training."""
from __future__ import annotations

import contextlib
import json
import subprocess
import sys

import pytest

from backend.runs import launcher
from backend.runs.store import RunStore
from backend.sweeps import control, keeper
from backend.sweeps.spec import sweep_from_dict
from rig import sshd
from tests.conftest import processes_naming, processes_of, ssh_task, wait_for

REPORT = ("import sys, tfconsole\nx = float(sys.argv[1])\n"
          "for s in range(1, 6): tfconsole.report(s, loss=1.0 / s, metrics={'val_loss': (x - 0.3) ** 2 + 1.0 / s})")


def _sweep(ssh_hosts, client_key, python_path, tmp_path, command, **over) -> dict:
    tasks = [ssh_task(ssh_hosts[0], "chief", sshd.free_port(), client_key, python_path, tmp_path / "h2"),
             ssh_task(ssh_hosts[1], "worker", sshd.free_port(), client_key, python_path, tmp_path / "h3")]
    return {"cluster": {"tasks": tasks}, "job": {"kind": "command", "command": command},
            "space": {"x": {"range": [0.0, 1.0]}}, "objective": {"metric": "val_loss", "direction": "min"},
            "budget": {"trials": 4}, "at_once": 2, "sampler": "random", "seed": 7, **over}


def _start(data, tmp_path, ssh_options, sweep_id=None) -> tuple:
    root = RunStore(tmp_path / "runs").root
    return root, control.start(sweep_from_dict(data), data, root, ssh_options, sweep_id=sweep_id, poll_s=0.3)


def _last_val_loss(tmp_path, run_id) -> float:
    """The independent record: the chief's own metrics.jsonl on its host."""
    path = next(tmp_path.glob(f"h*/runs/{run_id}.*/metrics.jsonl"))
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    return [x for x in lines if "val_loss" in json.dumps(x)][-1]


def _val_losses(tmp_path, run_id) -> list[tuple[int, float]]:
    """Every (step, val_loss) in the chief's own metrics.jsonl on its host, in order."""
    path = next(tmp_path.glob(f"h*/runs/{run_id}.*/metrics.jsonl"))
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    return [(x["step"], x["global"]["val_loss"]) for x in lines if "val_loss" in (x.get("global") or {})]


def _ended(root, sweep_id, within_s: float) -> dict:
    return wait_for(lambda: (s := control.status(root, sweep_id))["phase"] in ("finished", "failed") and s,
                    within_s, "the sweep to end")


def test_a_sweep_runs_its_budget_two_at_once_and_names_the_best(ssh_hosts, client_key, python_path,
                                                                tmp_path, ssh_options):
    data = _sweep(ssh_hosts, client_key, python_path, tmp_path, [python_path, "-c", REPORT, "{x}"])
    root, sweep_id = _start(data, tmp_path, ssh_options)
    found = wait_for(lambda: (s := control.status(root, sweep_id))["phase"] in ("finished", "failed") and s,
                     120, "the sweep to finish")
    assert found["phase"] == "finished", found
    assert [t["state"] for t in found["trials"]] == ["complete"] * 4
    hosts = {}
    for t in found["trials"]:
        run = launcher.attach(t["run_id"], store=RunStore(root), options=ssh_options)
        assert str(run.state.phase) == "finished" and processes_of(run) == []
        hosts[t["trial"]] = run.state.tasks[0].host
        record = _last_val_loss(tmp_path, t["run_id"])
        assert t["value"] == pytest.approx((t["params"]["x"] - 0.3) ** 2 + 0.2)
        assert str(round(t["value"], 6))[:6] in json.dumps(record)
        assert run.state.sweep == {"sweep": sweep_id, "trial": t["trial"], "params": t["params"]}
    by_record = min(found["trials"], key=lambda t: abs(t["params"]["x"] - 0.3))
    assert found["best"]["run_id"] == by_record["run_id"]
    assert set(hosts.values()) == {"127.0.0.2", "127.0.0.3"}   # both groups were used
    out = subprocess.run([sys.executable, "-m", "backend", "--runs", str(root), "sweep", "status", sweep_id, "--json"],
                         capture_output=True, text=True, timeout=60)
    assert json.loads(out.stdout)["best"]["trial"] == found["best"]["trial"]


def test_stopping_a_sweep_stops_its_trials_and_leaves_nothing(ssh_hosts, client_key, python_path,
                                                              tmp_path, ssh_options):
    slow = [python_path, "-c", "import sys, time; time.sleep(300)", "{x}"]
    root, sweep_id = _start(_sweep(ssh_hosts, client_key, python_path, tmp_path, slow), tmp_path, ssh_options)
    live = wait_for(lambda: len([t for t in control.status(root, sweep_id)["trials"] if t["run_id"]]) == 2,
                    60, "two trials to start")
    assert live
    found = keeper.stop(root, sweep_id)
    assert found["phase"] == "stopped" and [t["state"] for t in found["trials"]] == ["fail", "fail"]
    for t in found["trials"]:
        run = launcher.attach(t["run_id"], store=RunStore(root), options=ssh_options)
        assert str(run.state.phase) == "stopped" and processes_of(run) == []
    assert processes_naming(sweep_id) == []   # the after-stop log copies end by themselves


def test_an_objective_the_job_never_reports_is_named_after_the_first_trial(ssh_hosts, client_key, python_path,
                                                                          tmp_path, ssh_options):
    data = _sweep(ssh_hosts, client_key, python_path, tmp_path, [python_path, "-c", REPORT, "{x}"],
                  objective={"metric": "val_acc", "direction": "max"}, at_once=1)
    root, sweep_id = _start(data, tmp_path, ssh_options)
    found = wait_for(lambda: (s := control.status(root, sweep_id))["phase"] in ("finished", "failed") and s,
                     90, "the sweep to end")
    assert found["phase"] == "failed" and len(found["trials"]) == 1
    assert "'val_acc' was never reported by trial 0" in found["reason"] and "val_loss" in found["reason"]


SLOW_REPORT = ("import sys, time, tfconsole\nx = float(sys.argv[1])\n"
               "for s in range(1, 5):\n    time.sleep(1.0)\n"
               "    tfconsole.report(s, loss=1.0 / s, metrics={'val_loss': (x - 0.3) ** 2 + 1.0 / s})")


def test_a_sweep_whose_keeper_is_killed_resumes_and_runs_exactly_its_budget(ssh_hosts, client_key, python_path,
                                                                            tmp_path, ssh_options):
    """The console's machine restarts mid-sweep: the keeper dies with two trials running; resumed
    (from the public API), it keeps those two runs and finishes with the budget's 4 trials."""
    import os
    import signal

    from backend import api as tfconsole   # what `import tfconsole` finds (backend/client/__init__.py)
    from backend.runs import detached
    data = _sweep(ssh_hosts, client_key, python_path, tmp_path, [python_path, "-c", SLOW_REPORT, "{x}"])
    root, sweep_id = _start(data, tmp_path, ssh_options)
    def running() -> bool:   # both runs training (a keeper killed mid-launch: its trial is asked again)
        ids = [t["run_id"] for t in control.status(root, sweep_id)["trials"]]
        return len(ids) == 2 and all((root / i / "state.json").exists()
                                     and str(RunStore(root).load(i).phase) == "running" for i in ids)
    wait_for(running, 60, "two trials to run")
    here = control.folder(root, sweep_id)
    pid = detached.keeper_pid(here)
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: detached.keeper_pid(here) is None, 10, "the keeper to die")
    assert tfconsole.sweep_status(sweep_id, runs=root)["phase"] == "interrupted"
    running = {t["run_id"] for t in control.status(root, sweep_id)["trials"] if t["state"] == "running"}
    tfconsole.sweep_resume(sweep_id, runs=root)
    found = wait_for(lambda: (s := control.status(root, sweep_id))["phase"] in ("finished", "failed") and s,
                     120, "the resumed sweep to finish")
    assert found["phase"] == "finished", found
    trials = [t for t in found["trials"] if t["counted"]]
    assert [t["state"] for t in trials] == ["complete"] * 4, [(t["state"], t["note"], t["run_id"]) for t in trials]
    assert running <= {t["run_id"] for t in trials}   # the runs it had kept, not run again
    # The resumed keeper goes on with the search (seed 7): no finished trial's x drawn again
    # (was: its sampler, seeded anew, gave trials 2 and 3 the x of trials 0 and 1; issue 56).
    xs = [t["params"]["x"] for t in trials]
    assert len(set(xs)) == 4, xs
    assert not [t["note"] for t in found["trials"] if "the same parameters" in t["note"]]
    runs = [launcher.attach(t["run_id"], store=RunStore(root), options=ssh_options) for t in trials]
    assert len({r.run_id for r in runs}) == 4
    assert all(str(r.state.phase) == "finished" and processes_of(r) == [] for r in runs)
    assert sorted(p.name for p in root.iterdir() if p.name.startswith(sweep_id)) == sorted(r.run_id for r in runs)


def test_a_sweep_kept_in_a_teams_postgresql_runs_its_budget_there(ssh_hosts, client_key, python_path,
                                                                  tmp_path, ssh_options, postgres_url):
    """``storage:`` a PostgreSQL URL (a real server, rig/postgres.py): the study and its trials
    live in that database, not in a SQLite file in the runs folder; another machine reading the
    same URL with Optuna's own API finds every trial and the same best."""
    import optuna
    data = _sweep(ssh_hosts, client_key, python_path, tmp_path, [python_path, "-c", REPORT, "{x}"],
                  budget={"trials": 2}, storage=postgres_url)
    root, sweep_id = _start(data, tmp_path, ssh_options)
    found = wait_for(lambda: (s := control.status(root, sweep_id))["phase"] in ("finished", "failed") and s,
                     120, "the sweep to finish")
    assert found["phase"] == "finished", found
    assert not list(control.folder(root, sweep_id).glob("*.db"))
    study = optuna.load_study(study_name=sweep_id, storage=postgres_url)
    assert sorted(t.number for t in study.trials) == sorted(t["trial"] for t in found["trials"])
    assert study.best_trial.number == found["best"]["trial"]
    assert study.best_value == pytest.approx(found["best"]["value"])


DOWN_UP = ("import sys, tfconsole\nx = float(sys.argv[1])\n"
           "for s in range(1, 7): tfconsole.report(s, loss=1.0 / s, metrics={'val_loss': (x - 0.3) ** 2 + 0.1 * (s - 3) ** 2})")


@pytest.mark.parametrize("of", ["best", "last"])
def test_a_complete_trials_value_is_its_best_reported_value_or_with_of_last_its_last(
        of, ssh_hosts, client_key, python_path, tmp_path, ssh_options):
    """val_loss goes down to step 3, then up: ``of: best`` (the default) tells Optuna the
    minimum the chief's own metrics.jsonl holds, ``of: last`` its last value; status, the CLI
    and the best trial agree with it."""
    objective = {"metric": "val_loss", "direction": "min", **({"of": of} if of == "last" else {})}
    data = _sweep(ssh_hosts, client_key, python_path, tmp_path, [python_path, "-c", DOWN_UP, "{x}"],
                  budget={"trials": 2}, objective=objective)
    root, sweep_id = _start(data, tmp_path, ssh_options)
    found = _ended(root, sweep_id, 120)
    assert found["phase"] == "finished" and found["of"] == of, found
    assert [t["state"] for t in found["trials"]] == ["complete"] * 2
    for t in found["trials"]:
        record = [v for _, v in _val_losses(tmp_path, t["run_id"])]
        assert len(record) == 6 and min(record) < record[-1]   # the job's best is in the middle
        assert t["value"] == pytest.approx(min(record) if of == "best" else record[-1], rel=1e-6)
    best = min(found["trials"], key=lambda t: t["value"])
    assert (found["best"]["trial"], found["best"]["value"]) == (best["trial"], best["value"])
    out = subprocess.run([sys.executable, "-m", "backend", "--runs", str(root), "sweep", "status", sweep_id],
                         capture_output=True, text=True, timeout=60)
    assert f"each trial's {of} value; best: trial {best['trial']} = {best['value']:.6g}" in out.stdout, out


# 10 reports, one a second: a launch holds the keeper ~3.5 s on these hosts, so a trial still has
# several steps to go when the keeper, polling every 0.3 s, reads its first report and prunes it.
# val_loss hardly moves with the step, so a trial's rung value does not depend on which poll read it.
STEPS = 10
PACED = ("import sys, time, tfconsole\nx = float(sys.argv[1])\n"
         f"for s in range(1, {STEPS + 1}):\n    time.sleep(1.0)\n"
         "    tfconsole.report(s, loss=1.0 / s, metrics={'val_loss': 10 * (x - 0.3) ** 2 + 0.5 + 0.01 / s})")


@pytest.mark.parametrize("pruner", [{"hyperband": {"max_resource": STEPS}}, "successive_halving"])
def test_hyperband_and_successive_halving_prune_hopeless_trials_early_and_leave_nothing(
        pruner, ssh_hosts, client_key, python_path, tmp_path, ssh_options):
    """6 trials, 2 at once, seed 7 (x: 0.08, 0.78, 0.44, 0.72, 0.98, 0.54). With at most 5
    trials at a rung, Optuna's successive halving promotes only a trial as good as the best that
    reached the rung before it: the hopeless trials are those worse than a trial launched before
    them (1, 3, 4, 5); hyperband's brackets for this sweep id ({0, 1, 4} and {2, 3, 5}) keep the
    same ones. Each is stopped at the first rung the keeper checks, steps before its job's end."""
    data = _sweep(ssh_hosts, client_key, python_path, tmp_path, [python_path, "-c", PACED, "{x}"],
                  budget={"trials": 6}, pruner=pruner, seed=7)
    root, sweep_id = _start(data, tmp_path, ssh_options, sweep_id="sweep-hb")
    found = _ended(root, sweep_id, 240)
    assert found["phase"] == "finished", found
    trials = found["trials"]
    assert len(trials) == 6 and all(t["counted"] for t in trials), trials
    far = [abs(t["params"]["x"] - 0.3) for t in trials]
    hopeless = {n for n in range(6) if min(far[:n], default=1.0) < far[n]}
    pruned = {t["trial"] for t in trials if t["state"] == "pruned"}
    # Only hopeless trials are pruned, and some are (which ones exactly would depend on the order
    # in which trials running at once reach a rung: a loaded machine may swap two).
    assert pruned and pruned <= hopeless, [(t["trial"], t["state"], t["pruned_step"]) for t in trials]
    assert found["best"]["trial"] == min(range(6), key=far.__getitem__)
    for t in trials:
        run = launcher.attach(t["run_id"], store=RunStore(root), options=ssh_options)
        record = _val_losses(tmp_path, t["run_id"])
        assert processes_of(run) == [], (t, processes_of(run))
        if t["trial"] in pruned:
            said = f"at step {t['pruned_step']} (val_loss {dict(record)[t['pruned_step']]:.6g})"   # the record's value
            assert t["pruned_step"] < STEPS and t["note"] == f"pruned {said}", t
            assert str(run.state.phase) == "stopped", t
            assert run.state.attempts[-1].reason == f"pruned by the sweep {said}"
            assert t["pruned_step"] <= record[-1][0] < STEPS   # the job itself stopped before its end
        else:
            assert str(run.state.phase) == "finished" and record[-1][0] == STEPS
            assert t["value"] == pytest.approx(min(v for _, v in record), rel=1e-6)


# Answers saves as a fit or harness job says it does (train.json), but takes 8 s to reach its
# next save point after a save-stop request, as a slow fit did: a keeper killed in that window
# has decided the prune and not yet told Optuna.
SLOW_TO_STOP = ("import glob, os, sys, time, tfconsole\nx = float(sys.argv[1]); run = os.environ['TFCONSOLE_RUN_DIR']\n"
                "open(os.path.join(run, 'train.json'), 'w').write('{}')\nasked = None\n"
                f"for s in range(1, {STEPS + 1}):\n    time.sleep(0.5)\n"
                "    tfconsole.report(s, loss=1.0 / s, metrics={'val_loss': 10 * (x - 0.3) ** 2 + 0.5 + 0.01 / s})\n"
                "    if asked is None and glob.glob(os.path.join(run, 'requests', 'save-stop-*')):\n"
                "        asked = time.time()\n"
                "    while asked and time.time() - asked < 8:\n        time.sleep(0.2)\n"
                "    if asked:\n        break\n")


def test_a_prune_cut_off_by_a_killed_keeper_is_finished_with_its_first_step_and_reason(
        ssh_hosts, client_key, python_path, tmp_path, ssh_options):
    """The keeper decides a prune and asks the trial to save and stop; it is killed (kill -9)
    while it waits for that save. The resumed keeper finishes that prune: the trial is pruned at
    the step and with the value the first keeper named, not pruned again at a later step with
    "every task had exited before it could save"."""
    import os
    import signal
    import sqlite3

    from backend import api as tfconsole
    from backend.runs import detached
    data = _sweep(ssh_hosts, client_key, python_path, tmp_path, [python_path, "-c", SLOW_TO_STOP, "{x}"],
                  pruner="successive_halving", seed=7)
    root, sweep_id = _start(data, tmp_path, ssh_options, sweep_id="sweep-cut")
    here = control.folder(root, sweep_id)

    def decided():   # the prune the keeper stored before its stop: (trial, {"step", "said"})
        with contextlib.closing(sqlite3.connect(here / "optuna.db")) as db:
            rows = db.execute("SELECT t.number, a.value_json FROM trial_user_attributes a "
                              "JOIN trials t ON t.trial_id = a.trial_id WHERE a.key = 'pruned'").fetchall()
        return rows and (rows[0][0], json.loads(rows[0][1]))
    number, prune = wait_for(decided, 120, "a prune to be decided")
    run_id = f"{sweep_id}-t{number}"
    os.kill(detached.keeper_pid(here), signal.SIGKILL)   # within the job's 8 s to its save point
    wait_for(lambda: detached.keeper_pid(here) is None, 10, "the keeper to die")
    assert str(RunStore(root).load(run_id).phase) == "stopping"   # the stop was cut off
    run = launcher.attach(run_id, store=RunStore(root), options=ssh_options)
    wait_for(lambda: all(s.state == "exited" for s in run.status()), 60, "the trial's job to reach its save point and exit")
    tfconsole.sweep_resume(sweep_id, runs=root)
    found = _ended(root, sweep_id, 180)
    assert found["phase"] == "finished", found
    trial = next(t for t in found["trials"] if t["trial"] == number)
    assert trial["state"] == "pruned" and trial["pruned_step"] == prune["step"], trial
    assert trial["note"] == f"pruned {prune['said']}", trial
    run.reload()
    assert str(run.state.phase) == "stopped"
    assert run.state.attempts[-1].reason == f"pruned by the sweep {prune['said']}"
    said = f"at step {prune['step']} (val_loss {dict(_val_losses(tmp_path, run_id))[prune['step']]:.6g})"
    assert prune["said"] == said   # the value in the chief's own file at that step
    assert len([t for t in found["trials"] if t["counted"]]) == 4
    for t in found["trials"]:
        assert processes_of(launcher.attach(t["run_id"], store=RunStore(root), options=ssh_options)) == []
