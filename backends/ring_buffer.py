"""A lock-free ring of slots in one shared-memory segment: one writer, ``num_readers`` polling readers
(vLLM's shm_broadcast design). Used by ``ring`` (rank 0 writes, every worker reads) and ``hybrid`` (one
ring per node).

Layout: ``nslots`` slots of ``slot_bytes``. Slot header (little-endian): ``seq`` u64 (the "written" marker:
the chunk number it holds, 1, 2, 3, ... across the run), total message length u64, chunk offset u64, chunk
length u64, crc32 of the chunk u32; then one u64 "read" marker per reader (the last ``seq`` that reader
consumed from this slot); then the data. Chunk ``s`` lives in slot ``(s - 1) % nslots``. A message larger
than a slot spans consecutive chunks (so any size arrives, flow-controlled by the read markers).

Writer: before reusing a slot it waits until every reader's read marker there equals the chunk that was in
it (``s - nslots``); then it writes the data, the lengths and the crc, and the ``seq`` marker last. Reader:
polls its next slot until ``seq`` equals the chunk it expects, copies the data, checks the crc, then stores
its read marker.

Memory ordering. On x86-64 (TSO) stores become visible in program order and loads are not reordered with
other loads, so data-then-marker publishing is enough; CPython performs each buffer write as a call
(memcpy / struct.pack_into), which the C compiler cannot reorder. On weakly ordered CPUs (AArch64, POWER)
stores may become visible out of order, so a reader can see the new ``seq`` before the data: the crc over
the copied chunk detects that and the reader copies again until it matches (identical stale bytes would be
correct anyway; a stale chunk with an equal crc has probability 2**-32). The reader's read-marker store is
issued only after the crc comparison, which depends on every loaded byte: a store that is control-dependent
on prior loads is not made visible before them on these CPUs, so the writer never overwrites a slot that a
reader is still copying. The writer's data stores likewise depend on its check of the read markers.

Waiting. Readers spin for ``spin_us``, then yield the CPU (``sched_yield``) until ``idle_ms`` have passed
without a message, then sleep ``sleep_us`` between polls, so an idle reader costs well under 5% of a core;
every wait calls a liveness check at least every POLL_S. The writer's waits for read markers have the same
shape and a timeout. Where runnable processes outnumber cores, yielding is worse than sleeping: the yielding
reader takes turns with the ranks that do the work (``results/cpu/CONTROL.md``). So after LATE_YIELDS yields
in a row that came back late (another task had the core), on a host whose runnable tasks fill every core this
process may use (``host_contended``), the yield phase sleeps CONTENDED_SLEEP_S per poll instead, for the next
RECHECK_S. A host with idle cores keeps yielding: there a late yield is more likely a thread of this process
(``os.sched_yield`` lets go of the GIL), and naps would only make the reader wake later.
"""

from __future__ import annotations

import os
import struct
import time
import zlib
from multiprocessing import shared_memory

from common import check_int, is_number

from .base import POLL_S, ControlPlaneError
from .segments import MAX_SEGMENT_BYTES

HEADER = struct.Struct("<QQQQI")
SEQ = struct.Struct("<Q")
MARKERS_AT = 64
CONTENDED_YIELD_S = 50e-6  # a sched_yield longer than this ran another task: the host has no idle core
CONTENDED_SLEEP_S = 100e-6  # the yield phase's poll period on such a host (100 beat 20 us: CONTROL.md)
LATE_YIELDS = 3  # this many late yields in a row make the verdict (one can be a stray thread on an idle host)
RECHECK_S = 1.0  # how long the verdict stands before yielding is tried again


def data_offset(num_readers: int) -> int:
    """Byte offset of the first slot in the segment: the header and one 8-byte read marker per reader,
    rounded up to a 64-byte cache line."""
    return (MARKERS_AT + 8 * num_readers + 63) // 64 * 64


def check_ring(nslots, slot_bytes, spin_us, idle_ms, sleep_us, num_readers: int, owner: str) -> None:
    """Raises ValueError (naming ``owner``'s option) for a ring that cannot hold a chunk or is too large, or a
    readers' waiting policy (us, ms, us) that is not numbers >= 0."""
    for key, value in (("nslots", nslots), ("slot_bytes", slot_bytes)):
        check_int(f"{owner} option", key, value, 1)
    if nslots < 1 or slot_bytes <= data_offset(num_readers):
        raise ValueError(f"{owner} needs nslots >= 1 and slot_bytes > {data_offset(num_readers)}")
    if nslots * slot_bytes > MAX_SEGMENT_BYTES:
        raise ValueError(f"{owner}: a ring of {nslots} x {slot_bytes} bytes exceeds {MAX_SEGMENT_BYTES >> 20} MiB")
    for key, value in (("spin_us", spin_us), ("idle_ms", idle_ms), ("sleep_us", sleep_us)):
        if not is_number(value) or value < 0:
            raise ValueError(f"{owner} option {key} must be a number >= 0, got {value!r}")


def host_contended() -> bool:
    """True when the host's runnable tasks (``/proc/loadavg``'s running count, this process included) are at
    least the cores this process may run on; True also where that cannot be read (the late yields decide)."""
    try:
        with open("/proc/loadavg") as f:
            running = int(f.read().split()[3].split("/")[0])
        cores = len(os.sched_getaffinity(0))
    except (OSError, ValueError, IndexError, AttributeError):
        return True
    return running >= cores


class Poller:
    """Spin, then yield, then sleep: ``wait(ready)`` returns once ``ready()`` is true, calling ``check()``
    every POLL_S and raising ``ControlPlaneError`` after ``timeout_s`` (None: wait forever)."""

    def __init__(self, spin_us: float, idle_ms: float, sleep_us: float):
        self.spin_s, self.idle_s, self.sleep_s = spin_us / 1e6, idle_ms / 1e3, sleep_us / 1e6
        self.contended_until = 0.0  # time.monotonic() until which yielding is replaced by short sleeps
        self.late_yields = 0  # consecutive late yields

    def wait(self, ready, check, timeout_s: float | None, what: str) -> None:
        if ready():
            return
        start = time.monotonic()
        next_check = start + POLL_S
        while True:
            now = time.monotonic()
            idle = now - start
            if idle > self.idle_s:  # asleep between polls: one look per wake-up
                time.sleep(self.sleep_s)
                if ready():
                    return
            else:
                for _ in range(64):
                    if ready():
                        return
                if idle > self.spin_s:
                    self._yield()
            if now > next_check:
                check()
                next_check = now + POLL_S
                if timeout_s is not None and idle > timeout_s:
                    raise ControlPlaneError(f"ring: timed out after {timeout_s:.0f} s waiting for {what}")

    def _yield(self) -> None:
        """Give up the core once: ``sched_yield``, or a short sleep while the host is contended."""
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
    """The writing end of a ring in ``shm`` (``nslots * slot_bytes`` bytes) read by ``num_readers``."""

    def __init__(self, shm: shared_memory.SharedMemory, nslots: int, slot_bytes: int, num_readers: int,
                 poll_args: tuple[float, float, float]):
        self.shm, self.nslots, self.slot_bytes, self.num_readers = shm, nslots, slot_bytes, num_readers
        self.data_at = data_offset(num_readers)
        self.capacity = slot_bytes - self.data_at
        self.poller = Poller(*poll_args)
        self.next_seq = 1

    def _slot_free(self, base: int, previous: int) -> bool:
        buf = self.shm.buf
        return all(SEQ.unpack_from(buf, base + MARKERS_AT + 8 * r)[0] >= previous for r in range(self.num_readers))

    def write(self, payload: bytes, check, timeout_s: float) -> None:
        """Publish ``payload`` (any size), waiting for readers to free slots (``check`` every POLL_S).

        Raises:
            ControlPlaneError: a slot stayed busy for ``timeout_s``, or from ``check``.
        """
        total, view, offset, buf = len(payload), memoryview(payload), 0, self.shm.buf
        while True:
            seq = self.next_seq
            base = ((seq - 1) % self.nslots) * self.slot_bytes
            previous = seq - self.nslots
            if previous > 0:
                self.poller.wait(lambda base=base, previous=previous: self._slot_free(base, previous), check, timeout_s,
                                 "the readers to free a ring slot")
            n = min(self.capacity, total - offset)
            chunk = view[offset:offset + n]
            buf[base + self.data_at:base + self.data_at + n] = chunk
            HEADER.pack_into(buf, base, 0, total, offset, n, zlib.crc32(chunk))
            SEQ.pack_into(buf, base, seq)  # the written marker, last
            self.next_seq += 1
            offset += n
            if offset >= total:
                return


class RingReader:
    """Reader ``index`` (0-based) of a ring in ``shm``."""

    def __init__(self, shm: shared_memory.SharedMemory, nslots: int, slot_bytes: int, num_readers: int, index: int,
                 poll_args: tuple[float, float, float]):
        self.shm, self.nslots, self.slot_bytes, self.index = shm, nslots, slot_bytes, index
        self.data_at = data_offset(num_readers)
        self.poller = Poller(*poll_args)
        self.expected = 1

    def _read_chunk(self, base: int) -> tuple[int, int, bytes] | None:
        """(total, offset, data) of the chunk in the slot at ``base``, or None while it is inconsistent."""
        buf = self.shm.buf
        seq, total, offset, n, crc = HEADER.unpack_from(buf, base)
        if seq != self.expected:
            return None
        data = bytes(buf[base + self.data_at:base + self.data_at + n])
        return (total, offset, data) if zlib.crc32(data) == crc else None

    def read(self, check) -> bytes:
        """The next message, waiting without bound (``check`` every POLL_S; it raises to stop the wait)."""
        out = None
        while True:
            base = ((self.expected - 1) % self.nslots) * self.slot_bytes
            got = self._read_chunk(base)
            if got is None:
                box = [None]

                def ready(box=box, base=base):  # called within this iteration (bound for the linter)
                    box[0] = self._read_chunk(base)
                    return box[0] is not None

                self.poller.wait(ready, check, None, "a message")
                got = box[0]
            total, offset, data = got
            SEQ.pack_into(self.shm.buf, base + MARKERS_AT + 8 * self.index, self.expected)
            self.expected += 1
            if out is None and offset == 0 and len(data) == total:
                return data
            if out is None:
                out = bytearray(total)
            out[offset:offset + len(data)] = data
            if offset + len(data) >= total:
                return bytes(out)
