"""``files:`` of a command job: local scripts shipped into every host's run folder (issue 26, a
``train.py`` that lives only on the operator's machine). The spec's checks, what the engines
ship and where the command runs."""
from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from backend.config.spec import job_from_dict, job_to_dict, load_job, save_job
from backend.engines import direct
from backend.errors import SpecErrors


def errors(data: dict, base_dir: Path) -> dict[str, str]:
    with pytest.raises(SpecErrors) as info:
        job_from_dict(data, base_dir=base_dir)
    return {e.field: str(e) for e in info.value.errors}


def laptop(tmp_path: Path, *names: str) -> Path:
    folder = tmp_path / "laptop"
    folder.mkdir(exist_ok=True)
    for name in names:
        (folder / name).write_text("print('hi')\n")
    return folder


def test_files_resolve_against_the_job_files_folder_and_round_trip(tmp_path):
    folder = laptop(tmp_path, "train.py", "settings.json")
    job = job_from_dict({"kind": "command", "command": ["train.py"], "files": ["train.py", "settings.json"]},
                        base_dir=folder)
    assert job.files == (str(folder / "train.py"), str(folder / "settings.json"))
    save_job(job, folder / "job.yaml")
    assert "- train.py" in (folder / "job.yaml").read_text()      # beside the job file: kept relative
    assert load_job(folder / "job.yaml") == job
    assert job_to_dict(job)["files"] == list(job.files)


def test_a_missing_file_is_named_with_its_place_in_the_list(tmp_path):
    folder = laptop(tmp_path, "train.py")
    found = errors({"kind": "command", "command": ["train.py"], "files": ["train.py", "nope.py"]}, folder)
    assert list(found) == ["files[1]"]
    assert f"no file at {folder / 'nope.py'}" in found["files[1]"]


@pytest.mark.parametrize("name", ["my train.py", ".hidden.py", "a;b.py", "$(id).py", "-x.py"])
def test_a_name_that_is_not_a_plain_file_name_is_refused(tmp_path, name):
    folder = laptop(tmp_path, name)
    found = errors({"kind": "command", "command": ["train.py"], "files": [str(folder / name)]}, folder)
    assert list(found) == ["files[0]"], found
    assert "letters, digits" in found["files[0]"]


def test_two_files_of_one_name_and_a_harness_job_with_files_are_refused(tmp_path):
    folder = laptop(tmp_path, "train.py")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "train.py").write_text("")
    found = errors({"kind": "command", "command": ["train.py"],
                    "files": ["train.py", str(tmp_path / "other" / "train.py")]}, folder)
    assert list(found) == ["files[1]"] and "two files land as 'train.py'" in found["files[1]"]
    found = errors({"kind": "harness", "module": "train.py", "files": ["train.py"]}, folder)
    assert list(found) == ["files"] and "a harness job takes no files" in found["files"]
    assert list(errors({"kind": "command", "command": ["x"], "files": "train.py"}, folder)) == ["files"]


def test_the_files_travel_in_the_bundle_and_the_command_runs_in_their_folder(tmp_path):
    folder = laptop(tmp_path, "train.py")
    job = job_from_dict({"kind": "command", "command": ["train.py", "--epochs", "2"], "files": ["train.py"]},
                        base_dir=folder)
    with tarfile.open(fileobj=io.BytesIO(direct.bundle(job))) as tar:
        assert "job/train.py" in tar.getnames()
    assert direct.task_cwd(job, "/r/run-1") == "/r/run-1/job"
    assert direct.task_cwd(job_from_dict({"kind": "command", "command": ["x"]}), "/r/run-1") is None


def test_slurm_tasks_of_a_job_with_files_run_in_the_shipped_folder(tmp_path):
    from backend.config.slurm_spec import slurm_from_dict
    from backend.engines.slurm_script import preview
    folder = laptop(tmp_path, "train.py")
    job = job_from_dict({"kind": "command", "command": ["train.py"], "files": ["train.py"]}, base_dir=folder)
    spec = slurm_from_dict({"kind": "slurm", "host": "localhost", "transport": "local", "partition": "debug"})
    script = preview(spec, job)
    assert "--cwd tfconsole/runs/RUN_ID/job -- python3 train.py" in script, script


def form_values(**over) -> dict:
    from console.forms import launch_form
    return {**launch_form({"kind": "command", "command": []}), **over}


def test_the_launch_forms_files_field_ships_a_local_script_named_by_its_file_name(tmp_path):
    from console.forms import job_from_form, launch_form
    folder = laptop(tmp_path, "train.py")
    values = form_values(job_command="train.py --epochs 3", job_files=f"{folder / 'train.py'}")
    job = job_from_form(values, tmp_path, base_dir=folder)
    # The command keeps the bare name (the task runs in RUN/job), not this machine's path.
    assert job.command == ("train.py", "--epochs", "3") and job.files == (str(folder / "train.py"),)
    assert launch_form(job_to_dict(job))["job_files"] == str(folder / "train.py")
    with pytest.raises(SpecErrors) as info:
        job_from_form(form_values(job_command="train.py", job_files="train.py, gone.py"), tmp_path, base_dir=folder)
    assert [e.field for e in info.value.errors] == ["files[1]"] and "no file at" in str(info.value)


def test_run_paths_are_made_absolute_for_a_task_started_in_another_folder(tmp_path, monkeypatch):
    from backend.client.harness.spawn import run_paths_absolute
    monkeypatch.chdir(tmp_path)
    env = run_paths_absolute({"TFCONSOLE_RUN_DIR": "tfconsole/runs/r1", "PYTHONPATH": "tfconsole/runs/r1/lib:/opt/x",
                              "OTHER": "rel"})
    assert env == {"TFCONSOLE_RUN_DIR": f"{tmp_path}/tfconsole/runs/r1",
                   "PYTHONPATH": f"{tmp_path}/tfconsole/runs/r1/lib:/opt/x", "OTHER": "rel"}


def test_files_given_with_their_folders_keep_their_tree_on_every_host(tmp_path):
    """``files: [train.py, models/net.py]`` (issue 49): the package lands as job/models/net.py, so
    ``import models.net`` works on the host as at home; through the run's own copy, a saved job
    file and the bundle alike. A path through ``..`` or an absolute one lands by its name."""
    from backend.runs.launcher import _keep_module
    folder = laptop(tmp_path, "train.py")
    (folder / "models").mkdir()
    (folder / "models" / "__init__.py").write_text("")
    (folder / "models" / "net.py").write_text("WIDTH = 8\n")
    (tmp_path / "shared.json").write_text("{}")
    job = job_from_dict({"kind": "command", "command": ["train.py"],
                         "files": ["train.py", "models/__init__.py", "models/net.py", "../shared.json"]},
                        base_dir=folder)
    save_job(job, folder / "job.yaml")
    assert "- models/net.py" in (folder / "job.yaml").read_text()
    assert load_job(folder / "job.yaml") == job
    run_dir = tmp_path / "runs" / "r1"
    run_dir.mkdir(parents=True)
    kept = _keep_module(job, run_dir)
    assert (run_dir / "job" / "models" / "net.py").read_text() == "WIDTH = 8\n"
    for shipped in (job, kept):
        with tarfile.open(fileobj=io.BytesIO(direct.bundle(shipped))) as tar:
            names = sorted(n for n in tar.getnames() if n.startswith("job/"))
        assert names == ["job/models/__init__.py", "job/models/net.py", "job/shared.json", "job/train.py"]
    (folder / "my models").mkdir()
    (folder / "my models" / "net.py").write_text("")
    found = errors({"kind": "command", "command": ["x"], "files": ["my models/net.py"]}, folder)
    assert list(found) == ["files[0]"] and "'my models' is not a plain file or folder name" in found["files[0]"]
