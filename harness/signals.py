"""Ctrl-C, SIGTERM and SIGHUP stop a run the same orderly way, reported as an interruption even when a C
extension swallowed the ``KeyboardInterrupt`` or turned it into another error (:func:`as_interrupt`). A reader
of stdout that leaves (SIGPIPE: ``... | head``) stops nothing (:func:`outlive_stdout_reader`)."""

from __future__ import annotations

import _thread
import atexit
import contextlib
import functools
import json
import multiprocessing as mp
import os
import signal
import socket
import sys
import threading
import time

_RECEIVED: list[str] = []  # names of the signals received by this process, in order
_HANDLED = threading.Event()  # the harness has taken the interruption in hand (as_interrupt, exit_interrupted)
_OWED = threading.Event()  # an interruption is owed to the main thread: not raised yet, or swallowed since
_REMOTE: list[str] = []  # (torchrun) the stop signals that ended a worker, "SIGTERM on rank 1, node n1"
_ECHO = threading.Event()  # a worker's interruption is in hand: a first stop signal now is its agent's echo
AT_ONCE = threading.Event()  # nothing is started (the checks before the first job): a stop signal exits at once
_WRITING = threading.Event()  # a results file is being written (``whole``): a stop signal waits until it ends
REDELIVER_S = 10.0  # an interruption not taken in hand by then was swallowed: deliver it again
STUCK_S = 3.0  # a stop signal whose handler has not run by then: the main thread is stuck in C (_watch_stuck)
_WAKEUP: list[socket.socket] = []  # the socket pair of signal.set_wakeup_fd
POLL_S = 0.02


def _torch_importing() -> bool:
    """Whether a torch module is being imported (a ``KeyboardInterrupt`` raised then aborts the process)."""
    return any(getattr(getattr(m, "__spec__", None), "_initializing", False)
               for name, m in list(sys.modules.items()) if name == "torch" or name.startswith("torch."))


def _interrupt(signum, frame):
    _RECEIVED.append(signal.Signals(signum).name)
    if AT_ONCE.is_set():  # not raised: Hydra's or OmegaConf's cleanup could turn it into a traceback of their own
        os.write(2, f"{interrupted_line()}\n".encode())
        os._exit(interrupted_code())
    if _ECHO.is_set() and len(_RECEIVED) == 1:  # a worker's interruption is being handled: this is its echo
        return
    first = len(_RECEIVED) == 1
    if first:
        _OWED.set()
    # not a second Ctrl-C while the first one's stop runs (bounded by timeouts): it would break it
    raise_now = _OWED.is_set() and not _torch_importing() and not _WRITING.is_set()
    if raise_now:
        _OWED.clear()
    if first:  # after the clear: the thread asks again only for what is still owed
        threading.Thread(target=_redeliver, args=(signum,), name="interrupt-redelivery", daemon=True).start()
    if raise_now:
        raise KeyboardInterrupt(_RECEIVED[0])


def _redeliver(signum: int) -> None:
    """Raise the owed interruption in the main thread until the harness has taken it in hand: once torch's
    import is over, and again every ``REDELIVER_S`` (C code that clears Python errors can swallow it)."""
    due = time.monotonic() + REDELIVER_S
    while not _HANDLED.wait(POLL_S):
        if time.monotonic() >= due:
            _OWED.set()
            due = time.monotonic() + REDELIVER_S
        if _OWED.is_set() and not _torch_importing() and not _WRITING.is_set():
            _thread.interrupt_main(signum)  # asked until the handler raises: it defers while torch imports


@contextlib.contextmanager
def whole():
    """A block a stop signal does not cut (a row and its fsync): the interruption is raised once it ends."""
    _WRITING.set()
    try:
        yield
    finally:
        _WRITING.clear()


def stopping() -> bool:
    """Whether a stop signal has come (the run is being stopped: no long waits now)."""
    return bool(_RECEIVED)


def interrupted_line() -> str:
    """The one line an interrupted run prints: ``error: interrupted (SIGINT)``, naming the signal as
    :func:`interrupted_code` picks it (a worker's under torchrun: ``SIGTERM on rank 1, node n1``)."""
    first = (_REMOTE or _RECEIVED)[:1]
    return f"error: interrupted ({first[0]})" if first else "error: interrupted"


def _watch_stuck(sock: socket.socket) -> None:
    """Read each stop signal's byte (``signal.set_wakeup_fd``: written even while the main thread is stuck in C,
    where no Python handler runs, as in a collective waiting up to ``llm.timeout_s`` on a stopped worker). If the
    handler has not run ``STUCK_S`` later, kill the spawned workers: that ends the wait; the stop ends them anyway."""
    while sock.recv(1):
        deadline = time.monotonic() + STUCK_S
        while not _RECEIVED and time.monotonic() < deadline:
            time.sleep(POLL_S)
        with contextlib.suppress(RuntimeError, OSError):  # the set of children changed meanwhile, or one ended
            for child in [] if _RECEIVED else list(mp.process._children):  # not the resource tracker: no Process
                os.kill(child.pid, signal.SIGKILL)


def _unraisable(previous, unraisable) -> None:
    """``sys.unraisablehook``: an interruption raised where Python can only report it (a weakref callback or a
    ``__del__``, as importlib's module-lock callback in CI) is owed again at once, not printed as a traceback;
    anything else goes to the ``previous`` hook."""
    if isinstance(unraisable.exc_value, KeyboardInterrupt) and _RECEIVED:
        _OWED.set()  # _redeliver raises it in the main thread within POLL_S
        return
    previous(unraisable)


def install() -> None:
    """Route SIGINT, SIGTERM and SIGHUP to :func:`_interrupt` (main thread only; re-arms an ignored SIGINT), and
    watch for a main thread too stuck to run it (:func:`_watch_stuck`). Until the caller clears ``AT_ONCE`` (its
    work begins), a stop signal exits at once, in one line: one during this setup gave a traceback (session 54)."""
    AT_ONCE.set()
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _interrupt)
    sys.unraisablehook = functools.partial(_unraisable, sys.unraisablehook)
    read, write = _WAKEUP[:] = socket.socketpair()  # kept: closed, the wake-up bytes would go nowhere
    write.setblocking(False)
    signal.set_wakeup_fd(write.fileno(), warn_on_full_buffer=False)
    threading.Thread(target=_watch_stuck, args=(read,), name="stop-watch", daemon=True).start()


def as_interrupt(e: BaseException) -> BaseException:
    """``e``, or a ``KeyboardInterrupt`` naming the first signal when one arrived before ``e`` was handled. Not
    a worker's failure under torchrun (:func:`from_torchrun_agent`): there the SIGTERM came because of it."""
    if not _RECEIVED:
        # a worker's interruption or failure (torchrun): the SIGTERM its agent sends next stops nothing (after a
        # failure it gave a second line, `error: interrupted (SIGTERM)`, and exit 143 for 1: session 53)
        torchrun = "TORCHELASTIC_RUN_ID" in os.environ
        if isinstance(e, KeyboardInterrupt) or (torchrun and type(e).__name__ == "WorkerError"):
            _ECHO.set()
        if isinstance(e, KeyboardInterrupt):
            _REMOTE.append(str(e.args[0]) if e.args else "SIGINT")  # "SIGTERM on rank 1, node n1": 143 here too
        return e
    _HANDLED.set()
    if isinstance(e, KeyboardInterrupt) or (from_torchrun_agent() and type(e).__name__ == "WorkerError"):
        return e
    return KeyboardInterrupt(_RECEIVED[0])


def worker_stopped(e: KeyboardInterrupt) -> KeyboardInterrupt:
    """``e``, a worker's interruption found after this rank's own stop signal (its agent's echo, under torchrun),
    which the exit code and the interrupted line then name."""
    _REMOTE.append(str(e.args[0]) if e.args else "SIGINT")
    return e


def from_torchrun_agent() -> bool:
    """Whether the first stop signal was a SIGTERM under torchrun (its agent's, sent when a rank dies)."""
    return bool(_RECEIVED) and _RECEIVED[0] == "SIGTERM" and "TORCHELASTIC_RUN_ID" in os.environ


def exit_interrupted() -> None:
    """Exit with :func:`interrupted_code` after the atexit handlers (``sys.exit(130)`` after a
    ``KeyboardInterrupt`` in torch's import would end with -2)."""
    _HANDLED.set()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(interrupted_code())


def interrupted_code() -> int:
    """128 + the number of the stop signal that ended a worker (torchrun; this process's own, if any, was then its
    agent's echo), else of this process's first (130 SIGINT, 143 SIGTERM, 129 SIGHUP); 130 when neither is known."""
    name = ([r.split()[0] for r in _REMOTE] or _RECEIVED or ["SIGINT"])[0]
    return 128 + (signal.Signals[name].value if name in signal.Signals.__members__ else signal.SIGINT.value)


class _ReaderProof:
    """A text stream whose reader may leave, or whose disk may fill: from the first failed write on (``lost``: its
    error), its file descriptor writes to /dev/null (the buffered text too), so the process goes on as it would
    have, without a traceback; a full disk under stdout is said once on stderr, one under stderr nowhere."""

    def __init__(self, stream, say_lost: bool = True, error_file: str | None = None):
        self._stream, self.lost, self._say, self._error_file = stream, None, say_lost, error_file

    def __getattr__(self, name):
        return getattr(self._stream, name)

    def write(self, text: str) -> int:
        if self._error_file and text.startswith("error: "):  # torchrun's summary of a failed rank shows it
            with contextlib.suppress(OSError), open(self._error_file, "w") as f:
                json.dump({"message": {"message": text.strip(), "extraInfo": {"timestamp": str(int(time.time()))}}}, f)
            self._error_file = None  # the first: the cause
        try:
            return self._stream.write(text)
        except OSError as e:
            self._drop(e)
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as e:
            self._drop(e)

    def _drop(self, e: OSError) -> None:
        if self._say and self.lost is None and not isinstance(e, BrokenPipeError):  # a reader that left chose to
            print(f"warning: cannot write stdout ({e.strerror or e}): the rest of the printout is lost",
                  file=sys.stderr)
        self.lost = self.lost or e
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, self._stream.fileno())
        os.close(devnull)


def outlive_stdout_reader() -> None:
    """``... | head``, ``> /dev/full``, ``2> /dev/full``: the run (its row written once, its figures, its exit code:
    2 for bad input) goes on as without them. Nothing for a closed stream (``>&-``: ``sys.stdout`` is None, and
    ``print`` writes nothing)."""
    if sys.stdout is not None and not isinstance(sys.stdout, _ReaderProof):
        sys.stdout = _ReaderProof(sys.stdout)
    if sys.stderr is not None and not isinstance(sys.stderr, _ReaderProof):  # under torchrun: its error file too
        sys.stderr = _ReaderProof(sys.stderr, say_lost=False, error_file=os.environ.get("TORCHELASTIC_ERROR_FILE"))


def stdout_lost() -> bool:
    """Whether stdout failed for another reason than its reader leaving (a full disk: the printout is lost)."""
    return not isinstance(getattr(sys.stdout, "lost", None), (type(None), BrokenPipeError))
