"""A resumed sweep goes on with the search where it stopped (issue 56 item 13): a keeper killed
and started again (`sweep resume`) opened the study with a sampler seeded as the first one was,
so its random start-up draws began again and trials 4 and 5 had trials 0's and 1's parameters.
Each keeper here is what SweepKeeper does: open the study from its storage, ask, tell."""
from __future__ import annotations

from optuna.trial import TrialState

from backend.sweeps import study as studies
from backend.sweeps.spec import sweep_from_dict


def _spec(tmp_path, space: dict, sampler: str):
    return sweep_from_dict({
        "cluster": {"tasks": [{"role": "worker", "host": "10.0.0.1", "tf_port": 2222}]},
        "job": {"kind": "command", "command": ["python", "-c", "pass", *(f"{{{name}}}" for name in space)]},
        "space": space, "objective": {"metric": "val_loss"}, "budget": {"trials": 6},
        "sampler": sampler, "seed": 7, "storage": f"sqlite:///{tmp_path / 'optuna.db'}"})


def _keeper_runs(spec, tmp_path, trials: int) -> list[dict]:
    """One keeper's life: open the study, run ``trials`` trials to the end, then die."""
    study = studies.open_study(spec, tmp_path, "s")
    params = []
    for _ in range(trials):
        trial = studies.ask(study, spec.space)
        params.append(dict(trial.params))
        studies.tell(study, trial, float(len(params)))
    return params


def test_a_resumed_sweep_with_a_seed_draws_new_parameters(tmp_path):
    for sampler in ("tpe", "random"):
        spec = _spec(tmp_path / sampler, {"lr": {"log_range": [1e-4, 1e-1]}, "width": {"int_range": [1, 1000]}},
                     sampler)
        (tmp_path / sampler).mkdir()
        first = _keeper_runs(spec, tmp_path / sampler, 3)
        resumed = _keeper_runs(spec, tmp_path / sampler, 3)   # the keeper was killed: a new one
        assert not [p for p in resumed if p in first], (sampler, first, resumed)
        assert len({tuple(sorted(p.items())) for p in first + resumed}) == 6
        # Drawn new, not repeats asked again: `sweep status` lists six trials, nothing asked again.
        rows = studies.rows(studies.read_study(tmp_path / sampler, "s", spec.storage))
        assert [(r["state"], r["counted"]) for r in rows] == [("complete", True)] * 6, rows


def test_no_launched_trials_parameters_are_asked_again_until_the_space_has_nothing_else(tmp_path):
    spec = _spec(tmp_path, {"opt": {"choice": ["adam", "sgd"]}, "layers": {"int_range": [1, 2]}}, "random")
    seen = _keeper_runs(spec, tmp_path, 2) + _keeper_runs(spec, tmp_path, 2)
    assert sorted(tuple(sorted(p.items())) for p in seen) == sorted(
        (("layers", n), ("opt", o)) for n in (1, 2) for o in ("adam", "sgd"))   # all 4, none twice
    again = _keeper_runs(spec, tmp_path, 1)   # the space has nothing else: a repeat is taken
    assert again[0] in seen
    study = studies.read_study(tmp_path, "s", spec.storage)
    rows = studies.rows(study)
    asked_again = [r for r in rows if not r["counted"]]
    assert all(r["state"] == "fail" and r["note"].startswith("the same parameters as trial ") for r in asked_again)
    assert [r["state"] for r in rows if r["counted"]] == ["complete"] * 5   # the budget counts launched trials
    assert len(asked_again) <= 4 * studies.ASK_AGAIN
    assert study.get_trials(states=(TrialState.RUNNING,)) == []
