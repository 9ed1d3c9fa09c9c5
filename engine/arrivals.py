"""Requests added but not yet admitted: each waits here until its arrival time, then the engine hands it to
the scheduler at the next step boundary.

Under a plan (``control=ideal``'s timed pass) each request is admitted before the same launch as in the
recorded pass instead, so that the timed pass schedules the recorded steps, and in the same state: requests
the recording admitted while idle wait until the engine is idle again and then for their arrival, as
without a plan; requests it admitted while busy are admitted while busy, and the engine never holds a
running batch back to wait for one (a request admitted before its scheduled arrival counts as arriving at
its admission: at most the time the timed pass has gained on the recording since it was last idle)."""

from __future__ import annotations

import bisect

from .sequence import Sequence


class Arrivals:
    """Pending requests in arrival order (ties: the order they were added).

    ``log[n]``: (how many requests had been admitted when the engine launched step ``n``, whether the last
    of them were admitted while it was idle), for this pass. ``plan``: a log to follow (None: admit by
    arrival time alone).
    """

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
        """How many of the pending requests the plan admits now, before launch ``launches`` (0 while busy
        where the recording admitted them idle; None: no plan, or past its end, where admission goes by
        arrival time and the ideal plane reports the mismatch)."""
        if self.plan is None or launches >= len(self.plan):
            return None
        count, when_idle = self.plan[launches]
        return min(max(count - self.admitted, 0), len(self._pending)) if idle or not when_idle else 0

    def wait_until(self, now_s: float, launches: int, idle: bool) -> float | None:
        """The perf_counter() time to sleep until before admitting (None: admit now). The engine waits only
        while ``idle`` (nothing running, nothing in flight): for the next arrival, or under a plan for the
        last request the plan admits before this launch."""
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
