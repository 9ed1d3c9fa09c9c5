"""``queue``: one multiprocessing Queue per worker. ``put`` hands the bytes to the queue's feeder thread and
returns at once; the worker polls ``get`` every POLL_S so that it notices a dead driver."""

from __future__ import annotations

import multiprocessing as mp
import queue as queue_mod

from .base import POLL_S, ControlPlane, PeerGone, WorkerEndpoint
from .segments import register_semaphores, release_segment, unlink_name


class QueueControlPlane(ControlPlane):
    name = "queue"

    def __init__(self, world_size: int, timeout_s: float = 60.0, context=None):
        super().__init__(world_size, timeout_s, context)
        self.queues = [mp.get_context("spawn").Queue() for _ in range(self.num_workers)]
        # a Queue holds two locks and a semaphore, named in /dev/shm: listed so a SIGKILLed run's go too
        self.registry = register_semaphores([s for q in self.queues for s in (q._rlock, q._wlock, q._sem) if s])

    def endpoint(self, rank: int) -> QueueEndpoint:
        return QueueEndpoint(rank, self.queues[rank - 1])

    def _send_bytes(self, payload: bytes) -> None:
        self.liveness_check()  # put() never blocks, so this is where a dead worker is noticed
        for q in self.queues:
            q.put(payload)

    def unlink(self) -> None:
        unlink_name(self.registry)

    def close(self) -> None:
        for q in self.queues:
            q.close()
            q.cancel_join_thread()  # a dead reader must not block the driver's exit
        self.queues = []
        self.registry = release_segment(self.registry, unlink=True)  # and the semaphores it lists


class QueueEndpoint(WorkerEndpoint):
    """Worker side of :class:`QueueControlPlane`: takes each message from its own queue ``conn``."""

    def _recv_bytes(self) -> bytes:
        while True:
            try:
                return self.conn.get(timeout=POLL_S)
            except queue_mod.Empty:
                self.liveness_check()
            except (EOFError, OSError) as e:
                raise PeerGone(f"queue closed: {e}") from None


CONTROL_PLANE = QueueControlPlane
