"""Requests added but not yet admitted: each waits until its arrival time, then goes to the scheduler at the
next step boundary. Under a plan (``control=ideal``'s timed pass) each is admitted before the same launch as
in the recorded pass, in the same state: one the recording admitted while idle waits for idle and then for
its arrival; one admitted while busy is admitted while busy, never holding a running batch back (arriving,
if early, at its admission: at most what the timed pass gained on the recording since it was last idle)."""

from __future__ import annotations

import bisect

from .sequence import Sequence


class Arrivals:
    """Pending requests in arrival order (ties: the order added). ``log[n]``: (requests admitted when the
    engine launched step ``n``, whether the last of them while idle), for this pass. ``plan``: a log to follow
    (None: admit by arrival time alone)."""

    def __init__(self, plan: list[tuple[int, bool]] | None = None):
        self._pending: list[tuple[float, int, Sequence]] = []
        self.admitted = 0
        self._admitted_idle = False
        self.log: list[tuple[int, bool]] = []
        self.plan = plan

    def __len__(self) -> int:
        return len(self._pending)

    def add(self, seq: Sequence) -> None:
        bisect.insort(self._pending, (seq.arrival_s, seq.seq_id, seq), key=lambda item: item[:2])

    def _planned(self, launches: int, idle: bool) -> int | None:
        """How many pending requests the plan admits before launch ``launches`` (0 while busy where the
        recording admitted them idle; None: no plan, or past its end, where the ideal plane reports it)."""
        if self.plan is None or launches >= len(self.plan):
            return None
        count, when_idle = self.plan[launches]
        return min(max(count - self.admitted, 0), len(self._pending)) if idle or not when_idle else 0

    def wait_until(self, now_s: float, launches: int, idle: bool) -> float | None:
        """The perf_counter() time to sleep until before admitting (None: now). Only while ``idle`` (nothing
        running or in flight): the next arrival, or under a plan the last one it admits before this launch."""
        planned = self._planned(launches, idle)
        if planned is not None:
            t = self._pending[planned - 1][0] if planned and idle else now_s
        else:
            t = self._pending[0][0] if idle and self._pending else now_s
        return t if t > now_s else None

    def due(self, now_s: float, launches: int, idle: bool) -> list[Sequence]:
        """Take the requests to admit before launch ``launches``, in arrival order."""
        n = self._planned(launches, idle)
        if n is None:
            n = bisect.bisect_right(self._pending, now_s, key=lambda item: item[0])
        taken, self._pending = self._pending[:n], self._pending[n:]
        self.admitted += n
        if n:
            self._admitted_idle = idle
        for _, _, seq in taken:
            seq.arrival_s = min(seq.arrival_s, now_s)  # (only under a plan can it be later)
        return [seq for _, _, seq in taken]

    def on_launch(self) -> None:
        self.log.append((self.admitted, self._admitted_idle))
        self._admitted_idle = False
