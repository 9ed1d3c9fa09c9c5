"""A stop signal is reported as an interruption even when a C extension turned it into another error."""

from __future__ import annotations

import os
import signal
import time

import pytest

from harness import signals
from harness.report import one_line

STOPS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@pytest.fixture
def installed():
    old = {s: signal.getsignal(s) for s in STOPS}
    signals.install()
    yield
    for s, handler in old.items():
        signal.signal(s, handler)
    signals._RECEIVED.clear()


def test_an_error_without_a_signal_stays_itself(installed):
    e = ValueError("tensor x: bad shape")
    assert signals.as_interrupt(e) is e


@pytest.mark.parametrize("sig", STOPS)
def test_an_error_raised_in_place_of_the_interrupt_is_the_interrupt(installed, sig):
    # What safetensors did when Ctrl-C landed while a shard loaded: the KeyboardInterrupt came out as a
    # ValueError, and the run reported bad input (exit 2, no row) instead of an interruption (130, a row).
    try:
        try:
            os.kill(os.getpid(), sig)
            time.sleep(5)  # the handler raises within the sleep
            pytest.fail("the signal handler did not raise")
        except KeyboardInterrupt:
            raise ValueError("could not determine the shape of object type 'torch.storage.UntypedStorage'") from None
    except ValueError as e:
        err = signals.as_interrupt(e)
    assert isinstance(err, KeyboardInterrupt)
    assert one_line(err) == f"interrupted ({sig.name})"
