"""``gloo``: torch.distributed broadcast over a gloo process group of its own (SGLang's and TensorRT-LLM's
design): the size as one int64, then the bytes as uint8. Works across hosts.

It rendezvouses on the run's store under a prefix of its own, else on a TCPStore rank 0 hosts on a free port. A
dead driver's closed sockets end the workers' wait with an error. The driver joins in a thread it waits for
checking liveness, so a worker that dies before joining is reported instead of stalling the rendezvous.
"""

from __future__ import annotations

import socket
import threading
import time
import warnings
from datetime import timedelta

from .base import NETWORK, POLL_S, ControlPlane, ControlPlaneError, WorkerEndpoint

# torch is imported inside the methods: the harness reads the constructor for its config schema without it.
WORKER_WAIT = timedelta(days=7)  # an idle engine may send nothing for a long time; driver death still ends it
CONNECT_TRY_S = 1.0  # a worker's probe of rank 0's own TCPStore port; between probes it checks rank 0 lives
PREFIX = "control/gloo"


class GlooControlPlane(ControlPlane):
    name = "gloo"
    scope = NETWORK
    join_holds_gil = True  # ProcessGroupGloo's constructor: a stopped worker held rank 0 for the join's timeout

    def __init__(self, world_size: int, timeout_s: float = 60.0, context=None):
        from torch.distributed import TCPStore

        super().__init__(world_size, timeout_s, context)
        self.join_timeout = timedelta(seconds=max(timeout_s, self.context.startup_timeout_s))
        self.own_store = None
        if self.num_workers and self.context.store is None:
            self.own_store = TCPStore("0.0.0.0", 0, world_size, is_master=True, wait_for_workers=False,
                                      timeout=self.join_timeout)
        self.pg = self._connect_error = self._connector = None  # the group; what joining raised; the joining thread

    def endpoint(self, rank: int) -> GlooEndpoint:
        port = self.own_store.port if self.own_store is not None else None
        return GlooEndpoint(rank, self.context.host, port, self.world_size, self.join_timeout.total_seconds())

    def workers_started(self) -> None:
        from torch.distributed import PrefixStore, ProcessGroupGloo

        def connect():
            try:
                store = PrefixStore(PREFIX, self.own_store or self.context.store)
                self.pg = ProcessGroupGloo(store, 0, self.world_size, self.join_timeout)
            except BaseException as e:  # reported by wait_ready
                self._connect_error = e

        self._connector = threading.Thread(target=connect, name="gloo-control-connect", daemon=True)
        self._connector.start()

    def wait_ready(self) -> None:
        if self.pg is not None:
            return
        self._deadline_wait(lambda t: self._connector.join(t) or not self._connector.is_alive(),
                            "the workers to join the gloo control group", self.join_timeout.total_seconds())
        if self._connect_error is not None:
            raise ControlPlaneError(f"gloo control group: {self._connect_error}")

    def _send_bytes(self, payload: bytes) -> None:
        import torch
        from torch.distributed import BroadcastOptions

        self.wait_ready()
        opts = BroadcastOptions()
        opts.rootRank, opts.timeout = 0, timedelta(seconds=self.timeout_s)
        size = torch.tensor([len(payload)], dtype=torch.int64)
        try:
            self.pg.broadcast([size], opts).wait()
            if payload:
                with warnings.catch_warnings():  # the bytes are only read (we are the root)
                    warnings.simplefilter("ignore", UserWarning)
                    data = torch.frombuffer(payload, dtype=torch.uint8)
                self.pg.broadcast([data], opts).wait()
        except RuntimeError as e:
            self.liveness_check()
            raise ControlPlaneError(f"gloo broadcast failed: {e}") from None

    def close(self) -> None:
        self.pg = self.own_store = None


class GlooEndpoint(WorkerEndpoint):
    """Worker side: joins the gloo group (on ``host``:``port``, or the run's store) as ``rank``."""

    def __init__(self, rank: int, host: str, port: int | None, world_size: int, join_timeout_s: float = 600.0):
        super().__init__(rank)
        self.host, self.port, self.world_size, self.join_timeout_s = host, port, world_size, join_timeout_s
        self.store = self.pg = None

    def open(self, store=None) -> None:
        """Without the run's store, rank 0's own TCPStore's port is probed first, ``liveness_check`` between tries
        (TCPStore would retry a dead driver's port for its whole timeout). Raises PeerGone (from the check);
        ControlPlaneError: no answer in ``join_timeout_s``."""
        from torch.distributed import PrefixStore, ProcessGroupGloo, TCPStore

        deadline = time.monotonic() + self.join_timeout_s
        while self.port is not None:
            try:
                socket.create_connection((self.host, self.port), timeout=CONNECT_TRY_S).close()
            except OSError as e:
                self.liveness_check()
                if time.monotonic() > deadline:
                    raise ControlPlaneError(f"gloo: rank {self.rank} could not reach rank 0's store at {self.host}:"
                                            f"{self.port} in {self.join_timeout_s:.0f} s ({e.strerror or e})") from None
                time.sleep(POLL_S)
                continue
            store = TCPStore(self.host, self.port, self.world_size, is_master=False,
                             timeout=timedelta(seconds=self.join_timeout_s))
            store.set_timeout(WORKER_WAIT)
            break
        self.store = store
        self.pg = ProcessGroupGloo(PrefixStore(PREFIX, store), self.rank, self.world_size, WORKER_WAIT)

    def _recv_bytes(self) -> bytes:
        import torch

        size = torch.empty(1, dtype=torch.int64)
        try:
            self.pg.broadcast(size, 0).wait()
            n = int(size.item())
            if n == 0:
                return b""
            data = torch.empty(n, dtype=torch.uint8)
            self.pg.broadcast(data, 0).wait()
        except RuntimeError as e:  # any rank's end breaks the group: not PeerGone, which says rank 0 is gone
            raise ControlPlaneError(f"rank {self.rank}: gloo control group broken: {e}") from None
        return data.numpy().tobytes()

    def close(self) -> None:
        self.pg = self.store = None


CONTROL_PLANE = GlooControlPlane
