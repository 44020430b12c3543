"""kill -9 one worker: the survivor must fail fast and say why."""
import os
import signal
import time

from backend.diagnosis import diagnose as dg

from .conftest import read_metrics
from tests.conftest import wait_for

# The collective timeout bounds the wait even when no error reaches the survivor (a network
# partition); on localhost a dead peer is noticed within about a second (docs/facts.md #6).
COLLECTIVE_TIMEOUT_S = 20
BOUND_S = COLLECTIVE_TIMEOUT_S + 25   # + slack for a loaded 2-core machine


def test_kill_one_worker_the_other_exits_nonzero(launcher, tmp_path):
    run = str(tmp_path / "run")
    cluster = launcher.start(run, n=2, params=["epochs=1", "steps_per_epoch=100000",
                                               f"collective_timeout_s={COLLECTIVE_TIMEOUT_S}"])
    wait_for(lambda: any(m["step"] >= 20 for m in read_metrics(run)), 120, "step 20")
    victim, survivor = cluster.procs[1], cluster.procs[0]
    os.killpg(victim.pid, signal.SIGKILL)
    t0 = time.time()
    victim.wait(timeout=30)
    try:
        code = survivor.wait(timeout=BOUND_S)
    except Exception:
        raise AssertionError(f"survivor still running after {BOUND_S}s:\n{cluster.tails()}")
    elapsed = time.time() - t0
    assert code != 0
    last = cluster.log(0).strip().splitlines()[-1]
    assert "HARNESS FAILED" in last and "peer worker died" in last, last
    assert "peer worker died" in dg.diagnose(cluster.log(0))
    print(f"survivor exited {code} after {elapsed:.1f}s")
