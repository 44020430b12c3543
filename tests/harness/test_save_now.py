"""Save-now requests at random moments during a real two-worker run."""
import json
import os
import random
import time

from backend.client.harness import ckpt_index

from .conftest import read_metrics
from tests.conftest import wait_for

REQUEST_TIMEOUT = 60   # s for one request to be answered; a hang fails here, not in CI's limit


def test_save_now_at_random_moments(launcher, tmp_path):
    run = str(tmp_path / "run")
    # Long enough that three requests land mid-run (they take about 3 s; 1500 steps take 10 s or
    # more here); no scheduled save, so every save we see before the end came from a request.
    params = ["epochs=1", "steps_per_epoch=1500", "log_every=10", "checkpoint_every=0",
              "keep_checkpoints=20"]
    cluster = launcher.start(run, n=2, params=params)
    wait_for(lambda: read_metrics(run), 120, "the first metrics line")
    requests = os.path.join(run, "requests")
    os.makedirs(requests, exist_ok=True)
    rng = random.Random(os.getpid())
    saved = []
    for i in range(3):
        time.sleep(rng.uniform(0.0, 1.0))
        name = f"save-{i}-{rng.randrange(10**6)}"
        # Written under a dot name then renamed, like the console: the chief never sees half.
        tmp = os.path.join(requests, f".{name}.json")
        with open(tmp, "w") as fh:
            json.dump({"by": "test"}, fh)
        os.rename(tmp, os.path.join(requests, f"{name}.json"))
        done = os.path.join(requests, f"{name}.done")
        wait_for(lambda: os.path.exists(done), REQUEST_TIMEOUT, f"{name}.done")
        answer = json.load(open(done))
        assert answer["request"] == {"by": "test"}
        assert not os.path.exists(os.path.join(requests, f"{name}.json"))
        saved.append(answer["step"])
    assert cluster.wait() == [0, 0], cluster.tails()
    assert saved == sorted(saved) and len(set(saved)) == 3
    chief = {c["step"] for c in ckpt_index.list_complete(os.path.join(run, "checkpoints"))}
    other = {c["step"] for c in ckpt_index.list_complete(
        os.path.join(run, "worker_checkpoints", "worker-1"))}
    assert set(saved) <= chief and set(saved) <= other
    assert all(step % 10 == 0 and step < 1500 for step in saved)
