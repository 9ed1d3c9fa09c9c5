"""``ring``: a lock-free ring of slots in one shared-memory segment, rank 0 writing, every worker polling
(vLLM's design: ``ring_buffer.py``). The segment is found by name, so it works for the ranks of one host
however they were started."""

from __future__ import annotations

from datetime import timedelta

from .base import HOST, ControlPlane, WorkerEndpoint
from .ring_buffer import RingReader, RingWriter, check_ring


class RingControlPlane(ControlPlane):
    """Driver side. Args: see :class:`ControlPlane`; ``nslots`` / ``slot_bytes``: ring geometry (slot_bytes
    includes the slot header); ``spin_us`` / ``idle_ms`` / ``sleep_us``: the readers' waiting policy
    (``ring_buffer.py``). Raises ValueError: a bad option."""

    name = "ring"
    scope = HOST

    @classmethod
    def check_options(cls, world_size: int, nslots, slot_bytes, spin_us, idle_ms, sleep_us) -> None:
        check_ring(nslots, slot_bytes, spin_us, idle_ms, sleep_us, world_size - 1, cls.name)

    def __init__(self, world_size: int, timeout_s: float = 60.0, nslots: int = 16, slot_bytes: int = 1 << 18,
                 spin_us: float = 200.0, idle_ms: float = 50.0, sleep_us: float = 2000.0, context=None):
        super().__init__(world_size, timeout_s, context)
        self.check_options(world_size, nslots, slot_bytes, spin_us, idle_ms, sleep_us)
        self._open_ring(list(range(1, world_size)), (nslots, slot_bytes, (spin_us, idle_ms, sleep_us)))

    def _open_ring(self, readers: list[int], ring_args: tuple) -> None:
        """A ring (``ring_args``: nslots, slot_bytes, poll_args) for the ranks ``readers`` (none: no ring)."""
        self.readers, self.ring_args = readers, ring_args
        self.writer = RingWriter(len(readers), *ring_args) if readers else None

    def endpoint(self, rank: int) -> WorkerEndpoint:
        return RingEndpoint(rank, self.writer.name, self.ring_args, len(self.readers), self.readers.index(rank))

    def _send_bytes(self, payload: bytes) -> None:
        if self.writer is not None:
            self.writer.write(payload, self.liveness_check, self.timeout_s)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


class RingEndpoint(WorkerEndpoint):
    """Reader ``index`` of ``num_readers`` of the ring ``ring_args`` (nslots, slot_bytes, poll_args) in segment
    ``segment``; with ``key`` instead (hybrid's ranks behind a node leader), in the segment whose name the run's
    store holds under ``key``, waited for at most ``timeout_s`` (s)."""

    def __init__(self, rank: int, segment: str | None, ring_args: tuple, num_readers: int, index: int,
                 key: str | None = None, timeout_s: float = 60.0):
        super().__init__(rank)
        self.segment, self.geometry = segment, (num_readers, index, *ring_args)
        self.key, self.timeout_s = key, timeout_s
        self.reader = None

    def open(self, store=None) -> None:
        if self.key is not None:
            store.wait([self.key], timedelta(seconds=self.timeout_s))
            self.segment = store.get(self.key).decode()
        self.reader = RingReader(self.segment, *self.geometry)

    def _recv_bytes(self) -> bytes:
        return self.reader.read(self.liveness_check)

    def close(self) -> None:
        if self.reader is not None:
            self.reader.close()


CONTROL_PLANE = RingControlPlane
