"""Lifelines: one TCP connection from every worker to rank 0 for the whole run. End of file is the other side's
death (the kernel closes a dead process's sockets; keepalive covers a vanished host). Workers send framed
pickles: a traceback or an interruption, control-plane samples, a heartbeat every ``BEAT_S`` (none from a
stopped rank or one holding the GIL: stalled). A remote clock's offset is its time minus the midpoint of the
fastest of ``PINGS`` round trips, uncertain by half of it (Cristian 1989)."""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import pickle
import queue
import select
import socket
import struct
import sys
import threading
import time

FRAME = struct.Struct("!I")
PINGS = 16
BEAT_S = 0.5  # a worker's heartbeat period
STALL_S = 2.0  # no frame for this long (four beats) from an open lifeline: that rank is stalled
NOTE_S = 15.0  # a stalled rank is named on stderr this often (unless ``quiet``: a start-up wait says more)


def send_frame(sock: socket.socket, obj) -> None:
    """Send ``obj`` pickled, behind its length (FRAME). Raises OSError when the peer is gone."""
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    sock.sendall(FRAME.pack(len(data)) + data)


def recv_frame(sock: socket.socket):
    """The next framed object, or None when the peer closed the connection."""
    head = _recv_exact(sock, FRAME.size)
    body = None if head is None else _recv_exact(sock, FRAME.unpack(head)[0])
    return None if body is None else pickle.loads(body)


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    """``n`` bytes, or None when the connection ends (or fails) first."""
    buf = bytearray()
    with contextlib.suppress(OSError):
        while len(buf) < n and (chunk := sock.recv(n - len(buf))):
            buf += chunk
    return bytes(buf) if len(buf) == n else None


def _keepalive(sock: socket.socket) -> None:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for opt, value in (("TCP_KEEPIDLE", 2), ("TCP_KEEPINTVL", 1), ("TCP_KEEPCNT", 3)):
        if hasattr(socket, opt):
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, opt), value)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class LifelineServer:
    """Rank 0's end: listens on ``bind_host`` at a port the OS picks (``port``), accepts one connection per
    worker, syncs clocks with each if ``sync_clocks``, then reads reports and deaths."""

    def __init__(self, bind_host: str, sync_clocks: bool):
        self.listener = socket.create_server((bind_host, 0), backlog=128)
        self.port = self.listener.getsockname()[1]
        self.sync_clocks = sync_clocks
        self.hosts: dict[int, str] = {}  # rank -> host name
        self.offsets: dict[int, tuple[int, int]] = {}  # rank -> (clock offset, uncertainty) (ns)
        self.dead: dict[int, str] = {}  # rank -> reason
        self.finished: dict[int, int] = {}  # rank -> exit code it said goodbye with (a normal end, not a death)
        self.last_seen: dict[int, float] = {}  # rank -> monotonic time of its last frame
        self.silences: dict[int, float] = {}  # rank -> its longest silence over STALL_S since take_silences (s)
        self.stall_ends: dict[int, tuple[float, float]] = {}  # rank -> (s, monotonic end) of its last stall (0: own)
        self._loop_s = time.monotonic()  # when this thread last ran: a longer gap is a stall of this process
        self.quiet = False  # True: a caller names the stalled ranks itself
        self._noted: dict[int, int] = {}  # rank -> notes printed in its current silence
        self.reports: queue.Queue = queue.Queue()  # ("error" | "interrupted" | "stats", rank, payload)
        self.conns: dict[int, socket.socket] = {}
        self._bufs: dict[int, bytearray] = {}  # rank -> the bytes of its frame still arriving
        self._lock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=self._serve, name="lifelines", daemon=True)
        self._thread.start()

    def _greet(self, conn: socket.socket) -> None:
        _keepalive(conn)
        hello = recv_frame(conn)
        if not hello or hello[0] != "hello":
            conn.close()
            return
        _, rank, host = hello
        offset = (0, 0)
        if self.sync_clocks:
            best = None
            for _ in range(PINGS):
                t0 = time.monotonic_ns()
                send_frame(conn, ("ping",))
                reply = recv_frame(conn)
                t1 = time.monotonic_ns()
                if reply is None:
                    conn.close()
                    return
                if best is None or t1 - t0 < best[0]:
                    best = (t1 - t0, reply[1] - (t0 + t1) // 2)
            offset = (best[1], best[0] // 2)
        send_frame(conn, ("offset", *offset))
        with self._lock:
            self.hosts[rank], self.offsets[rank], self.conns[rank] = host, offset, conn
            self.last_seen[rank] = time.monotonic()

    def _serve(self) -> None:
        while not self._closed:
            with self._lock:
                by_sock = {c: r for r, c in self.conns.items()}
            try:
                ready, _, _ = select.select([self.listener, *by_sock], [], [], 0.05)
            except (OSError, ValueError):  # a socket closed meanwhile: the loop's test ends a close()
                continue
            self._check_own()
            for sock in ready:
                if sock is self.listener:
                    with contextlib.suppress(OSError):
                        conn, _ = self.listener.accept()
                        threading.Thread(target=self._greet, args=(conn,), daemon=True).start()
                    continue
                rank = by_sock[sock]
                frames = self._read(sock, rank)
                self._seen(rank)
                if frames is None:
                    with self._lock:
                        self.conns.pop(rank, None)
                        if rank not in self.finished:
                            self.dead.setdefault(rank, "its process is gone (lifeline closed)")
                    sock.close()
                for frame in frames or ():
                    if frame[0] == "bye":
                        self.finished[rank] = frame[1]
                    elif frame[0] != "beat":
                        self.reports.put((frame[0], rank, frame[1]))
            self._note_stalls()

    def _read(self, sock: socket.socket, rank: int) -> list | None:
        """The whole frames come from ``rank`` (one ``recv``: a worker stopped mid-frame leaves the rest in its
        buffer and cannot block this thread); None when the connection ended."""
        with contextlib.suppress(OSError):
            if chunk := sock.recv(1 << 20):
                buf, frames = self._bufs.setdefault(rank, bytearray()), []
                buf += chunk
                while len(buf) >= FRAME.size and len(buf) >= FRAME.size + (n := FRAME.unpack_from(buf)[0]):
                    frames.append(pickle.loads(buf[FRAME.size:FRAME.size + n]))
                    del buf[:FRAME.size + n]
                return frames
        return None

    def _check_own(self) -> None:
        """This thread did not run for over STALL_S (this process stopped, or the GIL held): the workers' silence
        meanwhile is this process's own (rank 0 in ``silences``), their last frames count from now."""
        now = time.monotonic()
        with self._lock:
            if (gap := now - self._loop_s) > STALL_S:
                self.silences[0] = max(gap, self.silences.get(0, 0.0))
                self.stall_ends[0] = (gap, now)
                self.last_seen = dict.fromkeys(self.last_seen, now)
            self._loop_s = now

    def _seen(self, rank: int) -> None:
        self._check_own()
        now = time.monotonic()
        with self._lock:
            if (gap := now - self.last_seen.get(rank, now)) > STALL_S:
                self.silences[rank] = max(gap, self.silences.get(rank, 0.0))
                self.stall_ends[rank] = (gap, now)
            self.last_seen[rank] = now
        self._noted.pop(rank, None)

    def _note_stalls(self) -> None:
        for rank, age in self.stalled().items():
            if not self.quiet and (n := int(age // NOTE_S)) > self._noted.get(rank, 0):
                self._noted[rank] = n
                print(f"note: rank {rank} has been silent for {age:.0f} s (stopped, or stuck holding the GIL)",
                      file=sys.stderr, flush=True)

    def recent_stalls(self, within_s: float) -> dict[int, float]:
        """{rank: how long it stalled (s)} of the stalls that ended within ``within_s`` (rank 0: this process's
        own); first lets this thread catch up with a stall of its own just ended (up to 0.5 s)."""
        deadline = time.monotonic() + 0.5
        while time.monotonic() - self._loop_s > STALL_S and time.monotonic() < deadline:
            time.sleep(0.01)
        now = time.monotonic()
        with self._lock:
            return {rank: gap for rank, (gap, end) in self.stall_ends.items() if now - end < within_s}

    def take_silences(self) -> dict[int, float]:
        """{rank: its longest silence over ``STALL_S`` (s), an ongoing one included} since the last call."""
        stalled = self.stalled()
        with self._lock:
            taken, self.silences = self.silences, {}
        return {**taken, **{r: max(age, taken.get(r, 0.0)) for r, age in stalled.items()}}

    def connected(self) -> set[int]:
        """Ranks that connected (alive or dead since)."""
        with self._lock:
            return set(self.conns) | set(self.dead)

    def stalled(self) -> dict[int, float]:
        """{rank: seconds since its last frame} of the open lifelines silent for more than STALL_S ({} while this
        thread has not run for that long: their frames are unread, the stall may be this process's)."""
        now = time.monotonic()
        with self._lock:
            if now - self._loop_s > STALL_S:
                return {}
            return {r: now - self.last_seen[r] for r in self.conns if now - self.last_seen.get(r, now) > STALL_S}

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self.listener.close()
        self._thread.join(timeout=1.0)
        with self._lock:
            for conn in self.conns.values():
                with contextlib.suppress(OSError):
                    conn.close()
            self.conns = {}


class Lifeline:
    """A worker's end: connects (retrying while rank 0's server comes up, at most ``timeout_s``; else
    TimeoutError) and answers the clock pings; ``watch()`` then ends this process when rank 0's end closes."""

    def __init__(self, host: str, port: int, rank: int, timeout_s: float):
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self.sock = socket.create_connection((host, port), timeout=5)
                break
            except OSError as e:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"rank {rank}: rank 0 ({host}:{port}) unreachable for {timeout_s:g} s") from e
                time.sleep(0.05)
        self.sock.settimeout(None)
        _keepalive(self.sock)
        self._send_lock = threading.Lock()
        self._closing = False
        send_frame(self.sock, ("hello", rank, socket.gethostname()))
        while (frame := recv_frame(self.sock)) is not None and frame[0] == "ping":
            send_frame(self.sock, ("pong", time.monotonic_ns()))
        if frame is None:  # else the ("offset", ...) that ends the greeting
            raise ConnectionError(f"rank {rank}: rank 0 closed the lifeline while greeting")

    def send(self, kind: str, payload) -> None:
        """A report to rank 0 ("error" with a traceback, "interrupted" with a signal's name, "stats" with
        control-plane samples)."""
        with self._send_lock:
            send_frame(self.sock, (kind, payload))

    def watch(self, on_death) -> None:
        """End this process (``os._exit(1)``, after ``on_death()``) as soon as rank 0's end closes; send a
        heartbeat every ``BEAT_S`` meanwhile."""

        def run():
            while recv_frame(self.sock) is not None:
                pass
            if not self._closing:  # not our own close() at a normal exit
                _die(on_death)

        def beat():
            with contextlib.suppress(OSError):  # rank 0's end is gone: run() handles it
                while not self._closing:
                    self.send("beat", None)
                    time.sleep(BEAT_S)

        threading.Thread(target=run, name="lifeline-watch", daemon=True).start()
        threading.Thread(target=beat, name="lifeline-beat", daemon=True).start()

    def close(self, code: int) -> None:
        """Tell rank 0 this is a normal end (exit code ``code``), not a death; close this end, not the process."""
        self._closing = True
        with contextlib.suppress(OSError):
            self.send("bye", code)
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()


def watch_parent(on_death) -> None:
    """A spawned process: ``os._exit(1)`` as soon as its parent is gone, even before its lifeline exists."""

    def run():
        select.select([mp.parent_process().sentinel], [], [])
        _die(on_death)

    threading.Thread(target=run, name="parent-watch", daemon=True).start()


def _die(on_death) -> None:
    """End this process at once (exit code 1) after ``on_death()``, whatever its other threads are doing."""
    with contextlib.suppress(Exception):
        on_death()
    os._exit(1)
