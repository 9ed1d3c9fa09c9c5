"""``pipe``: one one-way multiprocessing Pipe per worker, written in turn (``multiprocessing.Connection``'s
framing). A pipe holds ~64 KiB, so a large message waits for the worker to drain it. The driver writes
non-blocking, waiting with ``select`` in steps of POLL_S, so a dead worker (broken pipe: the driver closes its
copies of the read ends once the workers start) or one that stops reading (``timeout_s``) cannot block it forever.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import select
import struct
import time

from .base import POLL_S, ControlPlane, ControlPlaneError, PeerGone, WorkerEndpoint, wait_until


class PipeControlPlane(ControlPlane):
    name = "pipe"

    def __init__(self, world_size: int, timeout_s: float = 60.0, context=None):
        super().__init__(world_size, timeout_s, context)
        pairs = [mp.Pipe(duplex=False) for _ in range(self.num_workers)]
        self.readers, self.writers = [r for r, _ in pairs], [w for _, w in pairs]
        for w in self.writers:
            os.set_blocking(w.fileno(), False)

    def endpoint(self, rank: int) -> PipeEndpoint:
        return PipeEndpoint(rank, self.readers[rank - 1])

    def workers_started(self) -> None:
        for r in self.readers:
            r.close()

    def _write_all(self, rank: int, fd: int, data: memoryview) -> None:
        deadline = time.monotonic() + self.timeout_s
        while data:
            try:
                data = data[os.write(fd, data):]
            except BlockingIOError:  # the pipe is full
                select.select([], [fd], [], POLL_S)
                self.liveness_check()
                if time.monotonic() > deadline:
                    raise ControlPlaneError(f"pipe: rank {rank} read nothing for {self.timeout_s:.0f} s") from None
            except (BrokenPipeError, ConnectionResetError) as e:
                self.liveness_check()
                raise PeerGone(f"pipe to rank {rank} is broken: {e}") from None

    def _send_bytes(self, payload: bytes) -> None:
        n = len(payload)  # multiprocessing.Connection's header: 4-byte big-endian length, or -1 and 8 over 2 GiB
        header = struct.pack("!i", n) if n <= 0x7FFFFFFF else struct.pack("!iQ", -1, n)
        # Header and a small payload in one write: one wake-up for the reader.
        parts = [header + payload] if len(payload) < 65536 else [header, payload]
        for rank, w in enumerate(self.writers, start=1):
            for part in parts:
                self._write_all(rank, w.fileno(), memoryview(part))

    def close(self) -> None:
        for c in self.writers + self.readers:
            c.close()
        self.writers, self.readers = [], []


class PipeEndpoint(WorkerEndpoint):
    """Worker side of :class:`PipeControlPlane`: reads each message from its end ``conn`` of a one-way pipe."""

    def _recv_bytes(self) -> bytes:
        wait_until(self.conn.poll, self.liveness_check)
        try:
            return self.conn.recv_bytes()
        except (EOFError, OSError) as e:
            raise PeerGone(f"pipe from the driver closed: {e}") from None

    def close(self) -> None:
        self.conn.close()


CONTROL_PLANE = PipeControlPlane
