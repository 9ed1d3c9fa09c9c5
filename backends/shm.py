"""``shm``: one SharedMemory segment plus, per worker, a "ready" and an "ack" semaphore (nano-vllm's design).

Every worker acknowledges each chunk after copying it out, and rank 0 waits for all acks before writing the next;
a message larger than the segment goes as consecutive chunks. Semaphores, not ``Event``, whose ``set()`` waits
without a timeout for every process in ``wait()``: ``release()`` never blocks, every ``acquire`` here times out.

Segment layout: total message length, chunk offset, chunk length (little-endian u64), data from byte 64.
"""

from __future__ import annotations

import multiprocessing as mp
import struct

from common import check_int

from .base import ControlPlane, WorkerEndpoint, wait_until
from .segments import MAX_SEGMENT_BYTES, create_segment, open_segment, register_semaphores, release_segment, unlink_name

HEADER = struct.Struct("<QQQ")
DATA_OFFSET = 64


class ShmControlPlane(ControlPlane):
    """Driver side; ``segment_bytes``: the shared segment's size (bytes, > 64, <= 1 GiB; 1 MiB as in nano-vllm)."""

    name = "shm"

    @classmethod
    def check_options(cls, world_size: int, segment_bytes) -> None:
        check_int("shm option", "segment_bytes", segment_bytes, DATA_OFFSET + 1)
        if segment_bytes > MAX_SEGMENT_BYTES:
            raise ValueError(f"shm: segment_bytes={segment_bytes} exceeds {MAX_SEGMENT_BYTES >> 20} MiB")

    def __init__(self, world_size: int, timeout_s: float = 60.0, segment_bytes: int = 1 << 20, context=None):
        super().__init__(world_size, timeout_s, context)
        self.check_options(world_size, segment_bytes)
        ctx = mp.get_context("spawn")
        self.shm = create_segment(segment_bytes) if self.num_workers else None
        self.capacity = segment_bytes - DATA_OFFSET
        self.ready = [ctx.Semaphore(0) for _ in range(self.num_workers)]
        self.acks = [ctx.Semaphore(1) for _ in range(self.num_workers)]  # 1 = the segment is free
        self.registry = register_semaphores(self.ready + self.acks)  # a SIGKILLed run's are removed by the next

    def endpoint(self, rank: int) -> ShmEndpoint:
        return ShmEndpoint(rank, self.shm.name, self.ready[rank - 1], self.acks[rank - 1])

    def _send_bytes(self, payload: bytes) -> None:
        total, view, buf = len(payload), memoryview(payload), self.shm.buf
        for offset in range(0, max(total, 1), self.capacity):  # an empty message is one empty chunk
            n = min(self.capacity, total - offset)
            for rank, ack in enumerate(self.acks, start=1):
                self._deadline_wait(lambda t, a=ack: a.acquire(True, t), f"rank {rank} to read the previous chunk")
            buf[DATA_OFFSET:DATA_OFFSET + n] = view[offset:offset + n]
            HEADER.pack_into(buf, 0, total, offset, n)
            for ready in self.ready:
                ready.release()

    def unlink(self) -> None:
        unlink_name(self.shm)
        unlink_name(self.registry)

    def close(self) -> None:
        self.shm = release_segment(self.shm, unlink=True)
        self.ready = self.acks = []  # the registry's release, next, unlinks the named semaphores
        self.registry = release_segment(self.registry, unlink=True)


class ShmEndpoint(WorkerEndpoint):
    def __init__(self, rank: int, segment_name: str, ready, ack):
        super().__init__(rank)
        self.segment_name, self.ready, self.ack, self.shm = segment_name, ready, ack, None

    def open(self, store=None) -> None:
        self.shm = open_segment(self.segment_name)

    def _recv_bytes(self) -> bytes:
        buf, out = self.shm.buf, None
        while True:
            wait_until(lambda t: self.ready.acquire(True, t), self.liveness_check)
            total, offset, n = HEADER.unpack_from(buf, 0)
            if n == total:  # the common case, the whole message in one chunk: one copy
                data = bytes(buf[DATA_OFFSET:DATA_OFFSET + n])
                self.ack.release()
                return data
            if out is None:
                out = bytearray(total)
            out[offset:offset + n] = buf[DATA_OFFSET:DATA_OFFSET + n]
            self.ack.release()
            if offset + n >= total:
                return bytes(out)

    def close(self) -> None:
        self.shm = release_segment(self.shm, unlink=False)


CONTROL_PLANE = ShmControlPlane
