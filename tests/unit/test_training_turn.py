"""The test suite's own training slots (tests/conftest.py ``TrainingTurn``): at most
``TRAINING_SLOTS`` tests train at once, and a third waits until one gives its slot up."""
from __future__ import annotations

import fcntl
import threading

from tests.conftest import TRAINING_SLOTS, TrainingTurn


def _free_slots(folder) -> int:
    free = 0
    for slot in range(TRAINING_SLOTS):
        with open(folder / f"training-{slot}.lock", "w") as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                free += 1
            except BlockingIOError:
                pass
    return free


def test_two_tests_train_at_once_and_a_third_waits_for_a_slot(tmp_path):
    assert TRAINING_SLOTS == 2
    first, second, third = TrainingTurn(tmp_path), TrainingTurn(tmp_path), TrainingTurn(tmp_path)
    first.begin()
    assert _free_slots(tmp_path) == 1
    second.begin()
    assert _free_slots(tmp_path) == 0
    waiter = threading.Thread(target=third.begin, daemon=True)
    waiter.start()
    waiter.join(timeout=1.0)
    assert waiter.is_alive(), "a third test took a slot while two were training"
    second.end()
    waiter.join(timeout=30)
    assert not waiter.is_alive() and _free_slots(tmp_path) == 0
    first.end()
    third.end()
    assert _free_slots(tmp_path) == TRAINING_SLOTS


def test_a_test_that_takes_no_turn_holds_no_slot(tmp_path):
    TrainingTurn(None).begin()   # outside xdist, or a light or `waits` test
    assert _free_slots(tmp_path) == TRAINING_SLOTS


def test_a_turn_ended_early_stays_ended(tmp_path):
    """``training_turn.end()`` in a test body, then again at teardown: the slot is freed once and
    not taken back."""
    turn = TrainingTurn(tmp_path)
    turn.begin()
    turn.end()
    turn.begin()   # a later hook of the same test
    turn.end()
    assert _free_slots(tmp_path) == TRAINING_SLOTS
