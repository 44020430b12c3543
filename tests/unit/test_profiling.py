"""The profile's pure parts: the chief's ask, the op split, the page's rows; and the host
command's request and answer, run as the console runs it (``python -S RUN/lib hostctl``)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from backend.client.harness import profiling
from backend.profiles import describe, per_step
from console.monitor_view import profile_rows
from tests.unit.test_client import _unpack


def test_the_op_split_names_collective_input_and_compute_and_adds_up():
    found = profiling.summarize([("CollectiveReduceV2", 0.03), ("MatMul", 0.01), ("_MklMatMul", 0.005),
                                 ("IteratorGetNext", 0.004), ("NcclAllReduce", 0.001), ("MatMul", 0.01)])
    assert found["collective_s"] == pytest.approx(0.031)
    assert found["input_s"] == pytest.approx(0.004)
    assert found["compute_s"] == pytest.approx(0.025)
    assert [o["op"] for o in found["top_ops"]][:2] == ["CollectiveReduceV2", "MatMul"]
    assert found["top_ops"][1]["seconds"] == pytest.approx(0.02)   # one type, summed


def test_the_chief_asks_for_the_longest_window_within_the_bound(tmp_path):
    folder = tmp_path / "requests"
    folder.mkdir()
    assert profiling.steps_asked(profiling.requests_of(str(tmp_path))) == 0
    (folder / "profile-1.json").write_text(json.dumps({"steps": 3}))
    (folder / "profile-2.json").write_text(json.dumps({"steps": 10_000}))
    (folder / "profile-3.json").write_text("not json")
    (folder / "save-4.json").write_text("{}")          # a Save now is not a profile
    asked = profiling.requests_of(str(tmp_path))
    assert [p.rsplit("/", 1)[1] for p in asked] == ["profile-1.json", "profile-2.json", "profile-3.json"]
    assert profiling.steps_asked(asked) == profiling.MAX_STEPS


def test_a_worker_that_is_not_the_chief_never_asks(tmp_path):
    (tmp_path / "requests").mkdir()
    (tmp_path / "requests" / "profile-1.json").write_text(json.dumps({"steps": 3}))
    assert profiling.Profiler(str(tmp_path), "worker-1", is_chief=False).flag() == 0.0
    assert profiling.Profiler(str(tmp_path), "worker-0", is_chief=True).flag() == 3.0
    assert profiling.Profiler(None, "worker-0", is_chief=True).flag() == 0.0   # outside a run


def test_what_a_person_reads_of_a_profile():
    good = {"steps": 4, "seconds": 0.2, "compute_s": 0.01, "collective_s": 0.03, "input_s": 0.0,
            "top_ops": [{"op": "CollectiveReduceV2", "seconds": 0.03}], "error": None}
    assert per_step(good)["ms_per_step"] == pytest.approx(50.0)
    assert "collective 75 %" in describe(good) and "CollectiveReduceV2 7.50 ms" in describe(good)
    bad = {"error": "the profiler did not start: AlreadyExistsError: another profiler is running"}
    rows = profile_rows({"worker-0": good, "worker-1": bad})
    assert rows[0]["collective %"] == 75 and rows[0]["ms/step"] == 50.0
    assert rows[1]["ms/step"] is None and "another profiler is running" in rows[1]["top ops (ms/step)"]


def test_the_host_command_takes_a_request_and_answers_where_the_window_began(tmp_path):
    run = tmp_path / "run"
    _unpack(run)

    def hostctl(*args):
        out = subprocess.run([sys.executable, "-S", str(run / "lib"), "hostctl", *args, "--run", str(run)],
                             capture_output=True, text=True)
        return out.returncode, json.loads(out.stdout)
    assert hostctl("request-profile", "--steps", "0")[0] == 3          # refused, said as JSON
    code, asked = hostctl("request-profile", "--steps", "7")
    assert code == 0 and json.loads((run / "requests" / asked["name"]).read_text()) == {"steps": 7}
    assert hostctl("profile-done", "--name", asked["name"])[1] == {"step": None}
    chief = profiling.Profiler(str(run), "worker-0", is_chief=True)
    chief.flag()
    chief._answer({"step": 40, "steps": 7, "dir": profiling.folder_of(40)})
    assert hostctl("profile-done", "--name", asked["name"])[1] == {
        "step": 40, "steps": 7, "dir": "profile/step-40", "error": None}
    assert hostctl("profile-done", "--name", "../x.json")[0] == 3


def test_no_window_starts_at_an_attempts_first_meeting(tmp_path):
    """A request seen at the first meeting waits for the next one (the profiler never starts
    while the first step traces); nothing is answered meanwhile."""
    (tmp_path / "requests").mkdir()
    (tmp_path / "requests" / "profile-1-1.json").write_text(json.dumps({"steps": 3}))
    chief = profiling.Profiler(str(tmp_path), "worker-0", is_chief=True)
    chief.begin(1, [chief.flag(), 0.0], first=True)
    assert chief.until is None and not list((tmp_path / "requests").glob("*.done"))
