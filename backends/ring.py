"""``ring``: a lock-free ring of slots in one shared-memory segment, one writer, polling readers (vLLM's
shm_broadcast). The segment is found by name: it works for the ranks of one host however they were started.

Layout: ``nslots`` slots of ``slot_bytes``. Slot header (little-endian u64 unless said): ``seq`` (the "written"
marker: the chunk number it holds, 1, 2, 3, ...), total message length, chunk offset, chunk length, crc32 of the
chunk (u32); from MARKERS_AT one "read" marker per reader (the last ``seq`` it consumed here); then the data.
Chunk ``s`` lives in slot ``(s - 1) % nslots``. The writer reuses a slot once every read marker there equals the
chunk it held (``s - nslots``), and stores ``seq`` after the data; a reader polls until ``seq`` is the chunk it
expects, copies the data, checks the crc, then stores its read marker.

Memory ordering. On x86-64 (TSO) stores become visible in program order and loads are not reordered with
other loads, so data-then-marker publishing is enough (each CPython buffer write is a call the C compiler
cannot reorder). On weakly ordered CPUs (AArch64, POWER) a reader can see the new ``seq`` before the data: the
crc detects that and the reader copies again (a stale chunk with an equal crc: probability 2**-32). The
read-marker store depends on the crc comparison, hence on every loaded byte, and a store control-dependent on
prior loads is not made visible before them, so the writer (its data stores depend on its check of the
markers) never overwrites a slot being copied.

Waiting (readers and the writer alike, the writer with a timeout): spin for ``spin_us``, then ``sched_yield``
until ``idle_ms`` pass without a message, then sleep ``sleep_us`` between polls. After LATE_YIELDS late yields
in a row on a host whose runnable tasks fill this process's cores (``host_contended``), yielding only takes
turns with the ranks that do the work, so the yield phase sleeps CONTENDED_SLEEP_S per poll for RECHECK_S.
"""

from __future__ import annotations

import os
import struct
import time
import zlib
from datetime import timedelta
from functools import partial

from common import check_int, is_number

from .base import HOST, POLL_S, ControlPlane, ControlPlaneError, WorkerEndpoint
from .segments import MAX_SEGMENT_BYTES, create_segment, open_segment, release_segment, unlink_name

HEADER = struct.Struct("<QQQQI")
SEQ = struct.Struct("<Q")
MARKERS_AT = 64
CONTENDED_YIELD_S = 50e-6  # a sched_yield longer than this ran another task: the host has no idle core
CONTENDED_SLEEP_S = 100e-6  # the yield phase's poll period on such a host (results/cpu/CONTROL.md)
LATE_YIELDS = 3  # this many late yields in a row make the verdict (one can be a stray thread on an idle host)
RECHECK_S = 1.0  # how long the verdict stands before yielding is tried again


def data_offset(num_readers: int) -> int:
    """Byte offset of a slot's data: header and read markers, rounded up to a 64-byte cache line."""
    return (MARKERS_AT + 8 * num_readers + 63) // 64 * 64


def host_contended() -> bool:
    """Whether ``/proc/loadavg``'s runnable tasks are at least the cores this process may use (True: unreadable)."""
    try:
        with open("/proc/loadavg") as f:
            running = int(f.read().split()[3].split("/")[0])
        cores = len(os.sched_getaffinity(0))
    except (OSError, ValueError, IndexError, AttributeError):
        return True
    return running >= cores


class Poller:
    """``wait(ready, ...)`` returns ``ready()``'s value once true, calling ``check()`` every POLL_S; raises
    ControlPlaneError after ``timeout_s`` (s; None: no bound)."""

    def __init__(self, spin_us: float, idle_ms: float, sleep_us: float):
        self.spin_s, self.idle_s, self.sleep_s = spin_us / 1e6, idle_ms / 1e3, sleep_us / 1e6
        self.contended_until = 0.0  # time.monotonic() until which yielding is replaced by short sleeps
        self.late_yields = 0  # consecutive late yields

    def wait(self, ready, check, timeout_s: float | None, what: str):
        if got := ready():
            return got
        start = time.monotonic()
        next_check = start + POLL_S
        while True:
            now = time.monotonic()
            idle = now - start
            if idle > self.idle_s:  # asleep between polls: one look per wake-up
                time.sleep(self.sleep_s)
                if got := ready():
                    return got
            else:
                for _ in range(64):
                    if got := ready():
                        return got
                if idle > self.spin_s:
                    self._yield()
            if now > next_check:
                check()
                next_check = now + POLL_S
                if timeout_s is not None and idle > timeout_s:
                    raise ControlPlaneError(f"ring: timed out after {timeout_s:.0f} s waiting for {what}")

    def _yield(self) -> None:
        before = time.monotonic()
        if before < self.contended_until:
            time.sleep(CONTENDED_SLEEP_S)
            return
        os.sched_yield()
        self.late_yields = self.late_yields + 1 if time.monotonic() - before > CONTENDED_YIELD_S else 0
        if self.late_yields >= LATE_YIELDS:
            if host_contended():
                self.contended_until = before + RECHECK_S
            self.late_yields = 0


class RingWriter:
    """The writer, in a new segment ``name`` of ``nslots * slot_bytes`` bytes."""

    def __init__(self, num_readers: int, nslots: int, slot_bytes: int, poll_args: tuple[float, float, float]):
        self.shm = create_segment(nslots * slot_bytes)
        self.name, self.nslots, self.slot_bytes, self.num_readers = self.shm.name, nslots, slot_bytes, num_readers
        self.data_at = data_offset(num_readers)
        self.capacity = slot_bytes - self.data_at
        self.poller = Poller(*poll_args)
        self.next_seq = 1

    def _slot_free(self, base: int, previous: int) -> bool:
        buf = self.shm.buf
        return all(SEQ.unpack_from(buf, base + MARKERS_AT + 8 * r)[0] >= previous for r in range(self.num_readers))

    def write(self, payload: bytes, check, timeout_s: float) -> None:
        """Publish ``payload``. Raises ControlPlaneError: a slot stayed busy for ``timeout_s``, or from ``check``."""
        total, view, buf = len(payload), memoryview(payload), self.shm.buf
        for offset in range(0, max(total, 1), self.capacity):  # an empty message is one empty chunk
            seq = self.next_seq
            base = ((seq - 1) % self.nslots) * self.slot_bytes
            previous = seq - self.nslots
            if previous > 0:
                self.poller.wait(partial(self._slot_free, base, previous), check, timeout_s,
                                 "the readers to free a ring slot")
            n = min(self.capacity, total - offset)
            chunk = view[offset:offset + n]
            buf[base + self.data_at:base + self.data_at + n] = chunk
            HEADER.pack_into(buf, base, 0, total, offset, n, zlib.crc32(chunk))
            SEQ.pack_into(buf, base, seq)  # the written marker, last
            self.next_seq += 1

    def read_by_all(self, seq: int) -> bool:
        """Whether every reader has consumed chunk ``seq`` (so each holds the segment open)."""
        return self._slot_free(((seq - 1) % self.nslots) * self.slot_bytes, seq)

    def close(self) -> None:
        self.shm = release_segment(self.shm, unlink=True)


class RingControlPlane(ControlPlane):
    """Driver side; ``nslots`` / ``slot_bytes``: ring geometry (slot_bytes includes the slot header); ``spin_us`` /
    ``idle_ms`` / ``sleep_us``: the readers' waits (``Poller``). Raises ValueError: a bad option."""

    name = "ring"
    scope = HOST

    @classmethod
    def check_options(cls, world_size: int, nslots, slot_bytes, spin_us, idle_ms, sleep_us) -> None:
        owner, num_readers = cls.name, world_size - 1
        for key, value in (("nslots", nslots), ("slot_bytes", slot_bytes)):
            check_int(f"{owner} option", key, value, 1)
        if slot_bytes <= data_offset(num_readers):
            raise ValueError(f"{owner} option slot_bytes must be > {data_offset(num_readers)} (a slot's header for "
                             f"{num_readers} reader(s)), got {slot_bytes}")
        if nslots * slot_bytes > MAX_SEGMENT_BYTES:
            raise ValueError(f"{owner}: a ring of {nslots} x {slot_bytes} bytes exceeds {MAX_SEGMENT_BYTES >> 20} MiB")
        for key, value in (("spin_us", spin_us), ("idle_ms", idle_ms), ("sleep_us", sleep_us)):
            if not is_number(value) or value < 0:
                raise ValueError(f"{owner} option {key} must be a number >= 0, got "
                                 f"{format(value, 'g') if is_number(value) else repr(value)}")

    @classmethod
    def check_timing(cls, timeout_s: float, sleep_us=2000.0, **options) -> None:
        if sleep_us * 1e-6 >= timeout_s:  # a message sent while a reader sleeps would wait past the timeout
            raise ValueError(f"{cls.name} option sleep_us={sleep_us:g} must be below the timeout, {timeout_s:g} s "
                             f"(llm.timeout_s): a reader asleep that long misses the step")

    def __init__(self, world_size: int, timeout_s: float = 60.0, nslots: int = 16, slot_bytes: int = 1 << 18,
                 spin_us: float = 200.0, idle_ms: float = 50.0, sleep_us: float = 2000.0, context=None):
        super().__init__(world_size, timeout_s, context)
        self.check_options(world_size, nslots, slot_bytes, spin_us, idle_ms, sleep_us)
        self.check_timing(timeout_s, sleep_us)
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

    def unlink(self) -> None:
        if self.writer is not None:
            unlink_name(self.writer.shm)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


class RingEndpoint(WorkerEndpoint):
    """Reader ``index`` (0-based) of ``num_readers`` of the ring ``ring_args`` (nslots, slot_bytes, poll_args) in
    segment ``segment``; with ``key`` instead (hybrid's ranks behind a node leader), in the segment whose name the
    run's store holds under ``key``, waited for at most ``timeout_s`` (s)."""

    def __init__(self, rank: int, segment: str | None, ring_args: tuple, num_readers: int, index: int,
                 key: str | None = None, timeout_s: float = 60.0):
        super().__init__(rank)
        self.segment, self.index, self.key, self.timeout_s, self.shm = segment, index, key, timeout_s, None
        self.nslots, self.slot_bytes, poll_args = ring_args
        self.data_at = data_offset(num_readers)
        self.poller = Poller(*poll_args)
        self.expected = 1

    def open(self, store=None) -> None:
        if self.key is not None:
            store.wait([self.key], timedelta(seconds=self.timeout_s))
            self.segment = store.get(self.key).decode()
        self.shm = open_segment(self.segment)

    def _read_chunk(self, base: int) -> tuple[int, int, bytes] | None:
        buf = self.shm.buf
        seq, total, offset, n, crc = HEADER.unpack_from(buf, base)
        if seq != self.expected:
            return None
        data = bytes(buf[base + self.data_at:base + self.data_at + n])
        return (total, offset, data) if zlib.crc32(data) == crc else None

    def _recv_bytes(self) -> bytes:
        out = None
        while True:
            base = ((self.expected - 1) % self.nslots) * self.slot_bytes
            total, offset, data = self.poller.wait(partial(self._read_chunk, base), self.liveness_check, None,
                                                   "a message")
            SEQ.pack_into(self.shm.buf, base + MARKERS_AT + 8 * self.index, self.expected)
            self.expected += 1
            if len(data) == total:  # the whole message in one chunk
                return data
            if out is None:
                out = bytearray(total)
            out[offset:offset + len(data)] = data
            if offset + len(data) >= total:
                return bytes(out)

    def close(self) -> None:
        self.shm = release_segment(self.shm, unlink=False)


CONTROL_PLANE = RingControlPlane
