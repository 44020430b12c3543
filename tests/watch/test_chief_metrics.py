"""The chief's metric lines read from its host (``backend.watch.chief_metrics``): a sweep's keeper
reads only what was added since its last poll, a line being written waits, a replaced file is read
again from its start; an ended attempt's copy in the run's folder, which a host that does not
answer leaves as it was. The chief's folder and ``hostctl`` are real (a local task)."""
from __future__ import annotations

import json
import shutil

from backend.errors import HostError
from backend.hosts import remote
from backend.watch import chief_metrics
from tests.unit.test_stop_save_after_exit import _with_chief_folder


def _line(step: int, val_loss: float) -> bytes:
    return (json.dumps({"task": "worker-0", "step": step, "attempt": 1, "metrics": {"loss": 1.0},
                        "global": {"loss": 1.0, "val_loss": val_loss}}) + "\n").encode()


def test_growing_reads_only_new_whole_lines_and_starts_over_on_a_replaced_file(tmp_path, monkeypatch):
    run, _ = _with_chief_folder(tmp_path)
    path = tmp_path / "host" / "r1" / "metrics.jsonl"
    reader = chief_metrics.Growing(run)
    assert reader.read().tasks() == []                  # no file yet
    asked = []
    read_at = remote.read_at
    monkeypatch.setattr(remote, "read_at", lambda h, rel, offset, **kw: (asked.append(offset), read_at(h, rel, offset, **kw))[1])
    whole = _line(1, 0.9) + _line(2, 0.8)
    path.write_bytes(whole + _line(3, 0.7)[:20])       # step 3 half written
    assert list(reader.read().metric("val_loss")[1]) == [0.9, 0.8]
    with open(path, "ab") as fh:
        fh.write(_line(3, 0.7)[20:])
    assert list(reader.read().metric("val_loss")[1]) == [0.9, 0.8, 0.7]
    assert asked[-1] == len(whole)                      # the second poll asked from where the first stopped
    path.write_bytes(_line(1, 0.5))                      # a new file, shorter than what was read
    assert list(reader.read().metric("val_loss")[1]) == [0.5]


def test_an_ended_attempt_keeps_the_chiefs_lines_and_a_silent_host_keeps_the_earlier_copy(tmp_path, monkeypatch):
    run, _ = _with_chief_folder(tmp_path)
    (tmp_path / "host" / "r1" / "metrics.jsonl").write_bytes(_line(1, 0.9) + _line(2, 0.8))
    assert chief_metrics.keep(run)
    kept = chief_metrics.kept_path(run.local_dir)
    before = kept.read_bytes()
    assert before == _line(1, 0.9) + _line(2, 0.8)
    shutil.rmtree(tmp_path / "host" / "r1")              # the host lost the run's folder: nothing to copy
    assert chief_metrics.keep(run) is True and kept.read_bytes() == before

    def silent(*args, **kwargs):
        raise HostError("127.0.0.1", "ssh: connect to host 127.0.0.1 port 22: Connection timed out")
    monkeypatch.setattr(remote, "read_tail", silent)     # the host does not answer
    assert chief_metrics.keep(run) is False and kept.read_bytes() == before
