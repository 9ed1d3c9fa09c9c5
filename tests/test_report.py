"""What the harness prints: progress bars only on a terminal."""

from __future__ import annotations

import io

from harness.report import show_progress


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bars_are_drawn_only_on_a_terminal(monkeypatch):
    monkeypatch.setattr("sys.stderr", io.StringIO())  # a log file or a pipe: each refresh would be a new line
    assert not show_progress(True)
    monkeypatch.setattr("sys.stderr", _Terminal())
    assert show_progress(True) and not show_progress(False)
