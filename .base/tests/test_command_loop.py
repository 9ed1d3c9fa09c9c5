"""The one worker command loop (``runtime.worker.command_loop``) that the engine's and the broadcast workload's
workers both run: dispatch, the statistics report, exit, and a failing command."""

from __future__ import annotations

import pytest

from backends import EXIT
from backends.base import ControlStats
from runtime.worker import REPORT, command_loop


class Endpoint:
    """A worker end that hands out ``messages`` and records one sample per message received."""

    def __init__(self, messages):
        self.messages, self.stats = list(messages), ControlStats()

    def recv(self):
        self.stats.add(len(self.messages), 7)
        return self.messages.pop(0)

    def take_recv_stats(self) -> ControlStats:
        stats, self.stats = self.stats, ControlStats()
        return stats


class Lifeline:
    def __init__(self):
        self.sent = []

    def send(self, kind, payload):
        self.sent.append((kind, payload))


def test_commands_go_to_the_handler_reports_to_the_lifeline_and_exit_ends_the_loop():
    handled, lifeline = [], Lifeline()
    endpoint = Endpoint([("run", (1, 2)), (REPORT, ()), ("noop", ()), (REPORT, ()), (EXIT, ()), ("never", ())])
    code = command_loop(endpoint, lifeline, lambda m, a: handled.append((m, a)), lambda: {"launch_ns": [5]})
    assert code == 0 and handled == [("run", (1, 2)), ("noop", ())]
    assert endpoint.messages == [("never", ())]
    # each report holds the messages since the last one, without the report message itself
    assert lifeline.sent == [("stats", {"nbytes": [6], "ns": [7], "launch_ns": [5]}),
                             ("stats", {"nbytes": [4], "ns": [7], "launch_ns": [5]})]


def test_a_failing_command_ends_the_loop_with_its_exception():
    def handle(method, args):
        raise RuntimeError(f"{method} failed")

    with pytest.raises(RuntimeError, match="boom failed"):
        command_loop(Endpoint([("boom", ()), (EXIT, ())]), Lifeline(), handle)
