"""A full disk is named as one, with its host and the folder to free (issue 35)."""
from backend.diagnosis import diagnose
from backend.client.harness import ckpt_index
from backend.records.outcome import TaskStatus, conclude

TF_SAVE = ("tensorflow.python.framework.errors_impl.ResourceExhaustedError: {{function_node "
           "__wrapped__SaveV2_dtypes_23_device_/job:worker/replica:0/task:0/device:CPU:0}} "
           "/w/runs/r1.ab12/checkpoints/ckpt-280_temp/part-00000-of-00001.data-00000-of-00001.tempstate1; "
           "No space left on device [Op:SaveV2]")


def log(last: str) -> str:
    return f"step 270/1000\nTraceback (most recent call last):\n  File \"x.py\", line 1\n{last}\n"


def test_a_checkpoint_save_on_a_full_disk_names_the_checkpoint_folder():
    found = diagnose.diagnose(log(TF_SAVE))
    assert found.startswith("Disk full (no space left on device): free space in /w/runs/r1.ab12/checkpoints and")
    assert "resume from the last complete checkpoint" in found


def test_a_python_write_on_a_full_disk_names_its_folder_or_the_run_folder():
    assert "free space in /w/run/exports and" in diagnose.diagnose(log(
        "OSError: [Errno 28] No space left on device: '/w/run/exports/.tmp-s10/saved_model/x.pb'"))
    assert "free space in the task's run folder" in diagnose.diagnose(log("OSError: [Errno 28] No space left on device"))
    assert diagnose.full_folder("No space left on device", unknown="/w/run/checkpoints") == "/w/run/checkpoints"


def test_only_what_ended_the_task_counts():
    """An old warning about a full disk is not the cause of a later, other failure."""
    text = "warning: [Errno 28] No space left on device writing a cache\n" + log("ValueError: bad shape")
    assert diagnose.diagnose(text) == "The worker stopped with an error: ValueError: bad shape"
    assert diagnose.full_folder("ValueError: bad shape") is None


def test_the_attempts_reason_names_the_host_whose_disk_is_full():
    found = conclude([TaskStatus("chief-0", "gpu7", "exited", 1, diagnose.diagnose(log(TF_SAVE))),
                      TaskStatus("worker-0", "gpu8", "exited", 1, diagnose.PEER_DIED)])
    assert found.reason.startswith("chief-0 exited(1): disk full on gpu7 (no space left on device): "
                                   "free space in /w/runs/r1.ab12/checkpoints and"), found.reason


def test_a_failed_save_leaves_nothing_of_its_step(tmp_path):
    (tmp_path / "ckpt-10.index").write_text("x")
    (tmp_path / "ckpt-10.meta.json").write_text("{}")
    (tmp_path / "ckpt-20_temp").mkdir()
    (tmp_path / "ckpt-20_temp" / "part-00000").write_text("x")
    (tmp_path / "ckpt-20.data-00000-of-00001").write_text("x")
    assert ckpt_index.temp_folders(str(tmp_path)) == [str(tmp_path / "ckpt-20_temp")]
    ckpt_index.remove_partial(str(tmp_path), 20)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt-10.index", "ckpt-10.meta.json"]
