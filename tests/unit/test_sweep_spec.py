"""A sweep's spec (issue 50): bad input is refused naming the field and what to do; parameters
land where the job reads them; trials at once take disjoint groups of the cluster's hosts."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from backend.errors import SpecErrors
from backend.sweeps.spec import host_groups, load_sweep, sweep_from_dict, with_params

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _cluster(hosts=("10.0.0.1", "10.0.0.2")):
    return {"tasks": [{"role": "chief" if i == 0 else "worker", "host": h, "tf_port": 2222}
                      for i, h in enumerate(hosts)]}


def _sweep(**over):
    data = {"cluster": _cluster(), "job": {"kind": "harness", "module": str(EXAMPLES / "synthetic.py")},
            "space": {"learning_rate": {"log_range": [1e-4, 1e-1]}, "hidden": {"choice": [8, 16]}},
            "objective": {"metric": "val_loss", "direction": "min"}, "budget": {"trials": 4},
            "at_once": 2, "sampler": "tpe", "pruner": "median"}
    data.update(over)
    return data


def _refused(data) -> dict[str, str]:
    with pytest.raises(SpecErrors) as info:
        sweep_from_dict(data)
    return {e.field: str(e) for e in info.value.errors}


def test_a_good_sweep_builds_with_its_job_and_cluster():
    spec = sweep_from_dict(_sweep())
    assert [(d.name, d.kind) for d in spec.space] == [("learning_rate", "log_range"), ("hidden", "choice")]
    assert (spec.metric, spec.direction, spec.trials, spec.at_once) == ("val_loss", "min", 4, 2)
    assert [[t.host for t in g.tasks] for g in host_groups(spec.cluster, 2)] == [["10.0.0.1"], ["10.0.0.2"]]
    assert [[t.role.value for t in g.tasks] for g in host_groups(spec.cluster, 2)] == [["chief"], ["chief"]]


@pytest.mark.parametrize("entry, words", [
    ({"range": [0.5, 0.5]}, "is empty"),
    ({"range": [0.9, 0.1]}, "inverted (low above high). Write it as [0.1, 0.9]"),
    ({"log_range": [0.0, 0.1]}, "must stay above zero"),
    ({"log_range": [-1, 1]}, "must stay above zero"),
    ({"int_range": [1, 2.5]}, "whole numbers"),
    ({"choice": []}, "non-empty list"),
    ({"ranged": [1, 2]}, "expected one of choice, range, int_range, log_range"),
])
def test_a_bad_range_is_refused_naming_the_parameter(entry, words):
    found = _refused(_sweep(space={"learning_rate": entry}))
    assert words in found["space.learning_rate"], found


def test_a_parameter_the_job_does_not_take_names_the_closest():
    found = _refused(_sweep(space={"learning_rat": {"range": [0.1, 0.2]}}))
    assert "Did you mean 'learning_rate'?" in found["space.learning_rat"]


def test_a_command_job_takes_its_placeholders_and_env():
    job = {"kind": "command", "command": [sys.executable, "train.py", "--lr", "{lr}"]}
    found = _refused(_sweep(job=job, space={"lrr": {"range": [0.1, 0.2]}}))
    assert "Did you mean 'lr'?" in found["space.lrr"]
    spec = sweep_from_dict(_sweep(job=job, space={"lr": {"range": [0.1, 0.2]}, "env.BATCH": {"choice": [8]}}))
    trial = with_params(spec.job, {"lr": 0.15, "env.BATCH": 8})
    assert trial.command[-2:] == ("--lr", "0.15") and trial.env["BATCH"] == "8"


def test_more_trials_at_once_than_host_groups_is_refused():
    found = _refused(_sweep(at_once=3))
    assert "3 trials at once need 3 disjoint host groups, and the cluster has 2" in found["at_once"]
    assert "Set at_once to 2 or less" in found["at_once"]


def test_objective_budget_sampler_and_pruner_are_checked():
    found = _refused(_sweep(objective={"metric": "", "direction": "up"}, budget={},
                            sampler="tpee", pruner="hyper", storage="nowhere"))
    assert set(found) >= {"objective.metric", "objective.direction", "budget", "sampler", "pruner", "storage"}
    assert "Did you mean 'tpe'?" in found["sampler"] and "Did you mean 'hyperband'?" in found["pruner"]
    grid = _refused(_sweep(sampler="grid"))
    assert "a grid cannot search a log_range" in grid["space.learning_rate"]


def test_a_sweep_file_reads_its_job_and_cluster_beside_it(tmp_path):
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(_cluster()))
    (tmp_path / "job.yaml").write_text(yaml.safe_dump({"kind": "harness", "module": str(EXAMPLES / "synthetic.py")}))
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump(_sweep(cluster="cluster.yaml", job="job.yaml")))
    assert load_sweep(tmp_path / "sweep.yaml").job.module == str(EXAMPLES / "synthetic.py")
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump(_sweep(cluster="missing.yaml", job="job.yaml")))
    with pytest.raises(SpecErrors, match="cluster.file: cannot read"):
        load_sweep(tmp_path / "sweep.yaml")


def test_the_readme_example_sweep_reads_and_fills_the_keras_script_arguments():
    spec = load_sweep(EXAMPLES / "sweep_keras.yaml")
    assert (spec.metric, spec.direction, spec.at_once, spec.pruner) == ("val_accuracy", "max", 2, "median")
    job = with_params(spec.job, {"lr": 0.01, "batch": 64})
    assert job.command[job.command.index("--lr") + 1] == "0.01" and "{batch}" not in job.command
    assert [len(g.tasks) for g in host_groups(spec.cluster, spec.at_once)] == [2, 2]


def test_a_trials_value_is_its_best_reported_value_unless_of_last():
    from backend.sweeps.study import trial_value
    assert sweep_from_dict(_sweep()).of == "best"
    assert sweep_from_dict(_sweep(objective={"metric": "val_loss", "of": "last"})).of == "last"
    down_up = [0.9, 0.4, 0.6, float("nan")]
    assert trial_value(down_up, "min", "best") == 0.4
    assert trial_value(down_up, "max", "best") == 0.9
    assert trial_value(down_up[:3], "min", "last") == 0.6
    found = _refused(_sweep(objective={"metric": "val_loss", "of": "bestt", "from": 1}))
    assert "unknown value 'bestt'" in found["objective.of"] and "Use one of: best, last" in found["objective.of"]
    assert "Use only: metric, direction, of" in found["objective.from"]


def test_pruners_take_their_options_in_the_jobs_steps_and_bad_ones_are_named():
    import optuna
    from backend.sweeps.study import pruner
    spec = sweep_from_dict(_sweep(pruner="successive_halving"))
    assert dict(spec.pruner_options) == {"min_resource": 1, "reduction_factor": 3}
    assert isinstance(pruner(spec), optuna.pruners.SuccessiveHalvingPruner)
    spec = sweep_from_dict(_sweep(pruner={"hyperband": {"max_resource": 9, "reduction_factor": 2}}))
    built = pruner(spec)
    assert isinstance(built, optuna.pruners.HyperbandPruner)
    assert (built._min_resource, built._max_resource, built._reduction_factor) == (1, 9, 2)
    assert dict(sweep_from_dict(_sweep(pruner={"hyperband": None})).pruner_options)["max_resource"] == "auto"
    found = _refused(_sweep(pruner={"hyperband": {"max_resource": 1, "reduction_factor": 1, "eta": 3}}))
    assert "expected a step above min_resource (1) or auto" in found["pruner.hyperband.max_resource"]
    assert "at least 2" in found["pruner.hyperband.reduction_factor"]
    assert "Use only: min_resource, max_resource, reduction_factor" in found["pruner.hyperband.eta"]
    assert "median takes no options" in _refused(_sweep(pruner={"median": {"n": 1}}))["pruner.median"]
    assert "Did you mean 'successive_halving'?" in _refused(_sweep(pruner="successive_halvin"))["pruner"]
    assert "expected options as a mapping" in _refused(_sweep(pruner={"hyperband": 3}))["pruner.hyperband"]


def test_export_takes_the_checkpoint_the_trials_value_came_from():
    from backend.sweeps.best import best_step
    listed = [{"step": 10, "metrics": {"val_loss": 0.5}}, {"step": 20, "metrics": {"val_loss": 0.3}},
              {"step": 30, "metrics": {"val_loss": 0.4}}]
    assert best_step(listed, "val_loss", "min") == 20
    assert best_step(listed, "val_loss", "max") == 10
    assert best_step(listed, "val_loss", "min", "last") == 30


def test_a_misspelled_key_is_answered_with_the_closest_key():
    """``prunner: median`` (a typo an operator makes) names ``pruner``, as a misspelled
    parameter already named the closest one; a key like nothing allowed gets the list alone."""
    data = _sweep()
    data["prunner"] = data.pop("pruner", "median")
    found = _refused(data)
    assert found["prunner"].startswith("prunner: unknown key 'prunner'. Did you mean 'pruner'? Use only:"), found
    found = _refused(_sweep(objective={"metric": "val_loss", "directon": "min", "zzz": 1}))
    assert "Did you mean 'direction'?" in found["objective.directon"]
    assert "Did you mean" not in found["objective.zzz"] and "Use only: metric, direction, of" in found["objective.zzz"]
