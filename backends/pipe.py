"""``pipe``: one one-way multiprocessing Pipe per worker; the driver writes the message to each in turn.

``send_bytes`` blocks while a worker has not drained a large message (the pipe holds ~64 KiB), which is
part of this design's cost; a dead worker surfaces as a broken pipe. After the workers start, the driver
closes its copies of the read ends so that a dead reader really breaks the pipe.
"""

from __future__ import annotations

import multiprocessing as mp

from .base import POLL_S, ControlPlane, PeerGone, WorkerEndpoint


class PipeControlPlane(ControlPlane):
    """Driver side: the write ends of ``world_size - 1`` pipes."""

    name = "pipe"

    def __init__(self, world_size: int, timeout_s: float = 60.0):
        super().__init__(world_size, timeout_s)
        ctx = mp.get_context("spawn")
        pairs = [ctx.Pipe(duplex=False) for _ in range(self.num_workers)]
        self.readers = [r for r, _ in pairs]
        self.writers = [w for _, w in pairs]

    def endpoint(self, rank: int) -> "PipeEndpoint":
        return PipeEndpoint(rank, self.readers[rank - 1])

    def workers_started(self) -> None:
        for r in self.readers:
            r.close()

    def _send_bytes(self, payload: bytes) -> None:
        for rank, w in enumerate(self.writers, start=1):
            try:
                w.send_bytes(payload)
            except (BrokenPipeError, ConnectionResetError, OSError) as e:
                self.liveness_check()
                raise PeerGone(f"pipe to rank {rank} is broken: {e}") from None

    def close(self) -> None:
        for c in self.writers + self.readers:
            c.close()
        self.writers, self.readers = [], []


class PipeEndpoint(WorkerEndpoint):
    name = "pipe"

    def __init__(self, rank: int, conn):
        super().__init__(rank)
        self.conn = conn

    def _recv_bytes(self) -> bytes:
        self._wait(self.conn.poll)
        try:
            return self.conn.recv_bytes()
        except (EOFError, OSError) as e:
            raise PeerGone(f"pipe from the driver closed: {e}") from None

    def close(self) -> None:
        self.conn.close()


CONTROL_PLANE = PipeControlPlane
