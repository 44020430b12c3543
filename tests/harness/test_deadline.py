"""The bound on each training step (harness/deadline.py), with real workers.

TensorFlow's own collective timeout kept one sleeping thread per collective: two fast workers on
one host ran out of thread ids near step 3,400 and both aborted. The harness now bounds steps
itself: the thread count stays flat, and a peer that stops answering still ends the worker that
waits for it, with its stacks and a diagnosis.
"""
from backend.diagnosis import diagnose as dg

from .conftest import read_metrics
from tests.conftest import wait_for
from tests.integration.test_hang import HANGING_JOB


def _threads(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("Threads:"))


def test_thread_count_stays_flat_over_thousands_of_steps(launcher, tmp_path):
    run = str(tmp_path / "run")
    # The default collective_timeout_s (60): with TensorFlow's timeout each worker held about
    # 6,700 threads by step 1,500 here.
    cluster = launcher.start(run, n=2, params=["epochs=1", "steps_per_epoch=100000", "checkpoint_every=0"])
    wait_for(lambda: any(m["step"] >= 300 for m in read_metrics(run)), 180, "step 300")
    early = [_threads(p.pid) for p in cluster.procs]
    wait_for(lambda: any(m["step"] >= 1500 for m in read_metrics(run)), 300, "step 1500")
    late = [_threads(p.pid) for p in cluster.procs]
    for before, after in zip(early, late):
        assert after < before + 50, (early, late, cluster.tails())


def test_a_peer_that_stops_answering_ends_the_waiting_worker_with_its_stacks(launcher, tmp_path, training_turn):
    """worker-1 hangs in its input pipeline while its process lives on: its heartbeats go on, so
    TensorFlow reports nothing (a stopped or killed peer is caught by them instead); only the bound
    ends worker-0's wait in the collective."""
    job = tmp_path / "hanging_job.py"
    job.write_text(HANGING_JOB)
    run = str(tmp_path / "run")
    cluster = launcher.start(run, n=2, job=str(job), params=["epochs=1", "steps_per_epoch=100000",
                                                             "log_every=5", "collective_timeout_s=10"])
    wait_for(lambda: any(m["step"] >= 30 for m in read_metrics(run)), 180, "step 30")
    training_turn.end()   # what is left is the 10 s wait in the collective: nothing trains
    codes = cluster.wait(timeout=10 + 1 + 60)   # + slack for a loaded 2-core machine
    assert codes == [1, 1], cluster.tails()
    waiting, hung = cluster.log(0), cluster.log(1)
    assert "Timeout (0:00:11)!" in waiting and "most recent call first" in waiting, cluster.tails()
    assert dg.diagnose(waiting).startswith("No training step finished for 10 s (collective_timeout_s"), waiting[-2000:]
    assert "_maybe_hang" in hung and "_maybe_hang" not in waiting   # each worker's own stack
