"""``ring``: a lock-free ring of slots in one shared-memory segment (``ring_buffer.py``), found by name: it works
for the ranks of one host however they were started."""

from __future__ import annotations

from datetime import timedelta

from common import check_int, is_number

from .base import HOST, ControlPlane, WorkerEndpoint
from .ring_buffer import RingReader, RingWriter, data_offset
from .segments import MAX_SEGMENT_BYTES


class RingControlPlane(ControlPlane):
    """Driver side; ``nslots`` / ``slot_bytes``: ring geometry (slot_bytes includes the slot header); ``spin_us`` /
    ``idle_ms`` / ``sleep_us``: the readers' waits (``ring_buffer.py``). Raises ValueError: a bad option."""

    name = "ring"
    scope = HOST

    @classmethod
    def check_options(cls, world_size: int, nslots, slot_bytes, spin_us, idle_ms, sleep_us) -> None:
        owner, num_readers = cls.name, world_size - 1
        for key, value in (("nslots", nslots), ("slot_bytes", slot_bytes)):
            check_int(f"{owner} option", key, value, 1)
        if slot_bytes <= data_offset(num_readers):
            raise ValueError(f"{owner} needs nslots >= 1 and slot_bytes > {data_offset(num_readers)}")
        if nslots * slot_bytes > MAX_SEGMENT_BYTES:
            raise ValueError(f"{owner}: a ring of {nslots} x {slot_bytes} bytes exceeds {MAX_SEGMENT_BYTES >> 20} MiB")
        for key, value in (("spin_us", spin_us), ("idle_ms", idle_ms), ("sleep_us", sleep_us)):
            if not is_number(value) or value < 0:
                raise ValueError(f"{owner} option {key} must be a number >= 0, got {value!r}")

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
        self.key, self.timeout_s, self.reader = key, timeout_s, None

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
