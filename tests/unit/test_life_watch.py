"""The keeper's stall clock (outcome.LifeWatch): what counts as a sign of life."""
from backend.records.outcome import LifeWatch, Signs


def test_log_growth_and_real_cpu_use_reset_the_clock_idle_threads_do_not():
    life = LifeWatch(changed=0.0)
    assert life.observe(1.0, metrics_size=-1, signs={"w0": Signs(1.0, 10)}) == ["w0"]   # first seen
    # 10 ms of CPU in 10 s (a blocked TensorFlow's timers), same log: nothing moved
    assert life.observe(11.0, metrics_size=-1, signs={"w0": Signs(1.01, 10)}) == []
    assert life.idle(11.0) == 10.0
    assert life.observe(12.0, signs={"w0": Signs(1.01, 11)}) == ["w0"]          # it printed
    assert life.observe(13.0, signs={"w0": Signs(1.9, 11)}) == ["w0"]           # it computed
    assert life.observe(14.0, metrics_size=200, signs={"w0": Signs(1.9, 11)}) == ["metrics"]
    assert life.idle(20.0) == 6.0


def test_cpu_that_cannot_be_seen_is_no_sign():
    life = LifeWatch(changed=0.0)
    life.observe(1.0, signs={"w0": Signs(None, None)})
    assert life.observe(9.0, signs={"w0": Signs(None, None)}) == [] and life.idle(9.0) == 8.0
