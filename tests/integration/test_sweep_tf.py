"""A sweep of real TensorFlow trials (issue 50): examples/keras_fit.py under
MultiWorkerMirroredStrategy, 2 workers a trial, 4 trials, 2 at once on disjoint loopback sshd
hosts, the median pruner on val_loss. The best trial is the one the runs' own metrics.jsonl
say; a pruned trial was stopped before its last epoch, with a save; nothing is left on a host."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from backend import checkpoints
from backend.runs import launcher
from backend.runs.store import RunStore
from backend.sweeps import control
from backend.sweeps.spec import sweep_from_dict
from rig import sshd
from tests.conftest import processes_of, ssh_task, wait_for

ROOT = Path(__file__).resolve().parents[2]
EPOCHS, STEPS = 4, 5


def _best_val_loss(run) -> float:
    """The independent record: the lowest global val_loss in the chief's own metrics.jsonl on its
    host (a complete trial's value is its best reported one, objective.of's default)."""
    chief = run.state.chief
    out = run.transport(chief.name).run(["cat", f"{chief.remote_run_dir}/metrics.jsonl"]).stdout
    lines = [json.loads(x) for x in out.splitlines() if x.strip()]
    return min(m["global"]["val_loss"] for m in lines if "val_loss" in (m.get("global") or {}))


@pytest.mark.slow
def test_a_tensorflow_sweep_prunes_early_and_names_the_best_run(ssh_hosts, client_key, python_path,
                                                                tmp_path, ssh_options):
    tasks = [ssh_task(h, role, sshd.free_port(), client_key, python_path, tmp_path / f"h{n}")
             for n, (h, role) in enumerate(((ssh_hosts[0], "chief"), (ssh_hosts[0], "worker"),
                                            (ssh_hosts[1], "worker"), (ssh_hosts[1], "worker")))]
    data = {"cluster": {"tasks": tasks},
            "job": {"kind": "command",
                    "command": [str(ROOT / "examples" / "keras_fit.py"), "--epochs", str(EPOCHS),
                                "--steps", str(STEPS), "--batch", "32", "--lr", "{lr}", "--pace", "0.3"],
                    "env": {"TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}},
            "space": {"lr": {"choice": [0.01, 0.003, 1e-5, 2e-5]}},
            "objective": {"metric": "val_loss", "direction": "min"}, "budget": {"trials": 4},
            "at_once": 2, "sampler": "grid", "pruner": "median", "seed": 3}
    root = RunStore(tmp_path / "runs").root
    sweep_id = control.start(sweep_from_dict(data), data, root, ssh_options, poll_s=0.5)
    found = wait_for(lambda: (s := control.status(root, sweep_id))["phase"] in ("finished", "failed") and s,
                     240, "the sweep to finish", poll=1.0)
    assert found["phase"] == "finished", found
    trials = [t for t in found["trials"] if t["counted"]]
    assert len(trials) == 4 and {t["state"] for t in trials} <= {"complete", "pruned"}, trials
    assert [t for t in trials if t["state"] == "pruned" and t["pruned_step"] < EPOCHS * STEPS], trials
    runs = {t["trial"]: launcher.attach(t["run_id"], store=RunStore(root), options=ssh_options) for t in trials}
    hosts = {t["trial"]: {x.host for x in runs[t["trial"]].state.tasks} for t in trials}
    assert all(len(h) == 1 for h in hosts.values())   # each trial on its own group of hosts
    complete = [t for t in trials if t["state"] == "complete"]
    by_record = {t["trial"]: _best_val_loss(runs[t["trial"]]) for t in complete}
    for t in complete:
        assert t["value"] == pytest.approx(by_record[t["trial"]], rel=1e-6)
    assert found["best"]["trial"] == min(by_record, key=by_record.get)
    assert found["best"]["run_id"] == runs[found["best"]["trial"]].run_id
    for t in trials:
        run = runs[t["trial"]]
        assert processes_of(run) == [], (t, processes_of(run))
        if t["state"] == "pruned" and t["pruned_step"] < EPOCHS * STEPS:   # stopped early, with a save
            assert str(run.state.phase) == "stopped", t
            reason = run.state.attempts[-1].reason   # why it stopped, then the save it made
            assert re.fullmatch(rf"pruned by the sweep at step {t['pruned_step']} \(val_loss [0-9.e+-]+\): "
                                r"saved at step \d+ on every worker", reason), reason
            assert run.state.attempts[-1].last_step < EPOCHS * STEPS   # saved and stopped before its end
        elif t["state"] == "pruned":   # pruned on its last epoch's value: it may have finished first
            assert str(run.state.phase) in ("stopped", "finished"), t
        else:
            assert str(run.state.phase) == "finished"
    print("states:", [(t["trial"], t["params"], t["state"], t["pruned_step"], t["value"]) for t in trials])

    # One action exports the best trial's best checkpoint, verified as Export does (from the
    # command line, as an operator types it).
    import subprocess
    import sys
    best_run = runs[found["best"]["trial"]]
    listed = {c["step"]: c for c in checkpoints.list_checkpoints(best_run)}
    out = subprocess.run([sys.executable, "-m", "backend", "--runs", str(root), "--known-hosts", ssh_options.known_hosts,
                          "--ssh-config", ssh_options.ssh_config, "sweep", "export", sweep_id, "--json"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    exported = json.loads(out.stdout)
    assert exported["run_id"] == best_run.run_id and exported["match"] is True
    saved = {s: c["metrics"]["val_loss"] for s, c in listed.items() if "val_loss" in (c.get("metrics") or {})}
    assert saved and exported["chosen_step"] == min(saved, key=saved.get), (exported["chosen_step"], saved)
    assert exported["step"] == exported["chosen_step"]
    assert all(Path(p).exists() for p in exported["paths"].values())   # the chief's host is this machine
