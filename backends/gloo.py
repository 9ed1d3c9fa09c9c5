"""``gloo``: torch.distributed broadcast over a gloo process group of its own (SGLang's and TensorRT-LLM's
design): first the size as one int64, then the bytes as a uint8 tensor.

The group is separate from the data plane (which may be NCCL): the driver hosts a TCPStore on a free port
and every rank builds a ``ProcessGroupGloo`` on it. Workers block in the broadcast; a dead driver closes
its sockets, which ends the wait with an error. The driver builds its side in a background thread from
``workers_started()``, and the first send waits for it while checking liveness, so a worker that dies
before joining is reported instead of stalling the rendezvous until its timeout.
"""

from __future__ import annotations

import threading
import warnings
from datetime import timedelta

import torch
from torch.distributed import PrefixStore, ProcessGroupGloo, TCPStore

from .base import ControlPlane, ControlPlaneError, PeerGone, WorkerEndpoint

WORKER_WAIT = timedelta(days=7)  # an idle engine may send nothing for a long time; driver death still ends it


def _group(port: int, rank: int, world_size: int, timeout: timedelta, is_master: bool, store=None):
    store = store or TCPStore("127.0.0.1", port, world_size, is_master=is_master, timeout=timeout)
    return store, ProcessGroupGloo(PrefixStore("control", store), rank, world_size, timeout)


class GlooControlPlane(ControlPlane):
    """Driver side (rank 0 of the control group)."""

    name = "gloo"

    def __init__(self, world_size: int, timeout_s: float = 60.0):
        super().__init__(world_size, timeout_s)
        self.timeout = timedelta(seconds=timeout_s)
        self.store = TCPStore("127.0.0.1", 0, world_size, is_master=True, wait_for_workers=False,
                              timeout=self.timeout) if self.num_workers else None
        self.pg = None
        self._connect_error: BaseException | None = None
        self._connector: threading.Thread | None = None

    def endpoint(self, rank: int) -> "GlooEndpoint":
        return GlooEndpoint(rank, self.store.port, self.world_size)

    def workers_started(self) -> None:
        def connect():
            try:
                _, self.pg = _group(0, 0, self.world_size, self.timeout, True, store=self.store)
            except BaseException as e:  # reported to the sender
                self._connect_error = e

        self._connector = threading.Thread(target=connect, name="gloo-control-connect", daemon=True)
        self._connector.start()

    def _wait_connected(self) -> None:
        if self.pg is not None:
            return
        if self._connector is None:
            self.workers_started()

        def joined(timeout: float) -> bool:
            self._connector.join(timeout)
            return not self._connector.is_alive()

        self._deadline_wait(joined, "the workers to join the gloo control group")
        if self._connect_error is not None:
            raise ControlPlaneError(f"gloo control group: {self._connect_error}")

    def _send_bytes(self, payload: bytes) -> None:
        self._wait_connected()
        size = torch.tensor([len(payload)], dtype=torch.int64)
        try:
            self.pg.broadcast(size, 0).wait()
            if payload:
                with warnings.catch_warnings():  # the bytes are only read (we are the root)
                    warnings.simplefilter("ignore", UserWarning)
                    data = torch.frombuffer(payload, dtype=torch.uint8)
                self.pg.broadcast(data, 0).wait()
        except RuntimeError as e:
            self.liveness_check()
            raise ControlPlaneError(f"gloo broadcast failed: {e}") from None

    def close(self) -> None:
        self.pg = None
        self.store = None


class GlooEndpoint(WorkerEndpoint):
    name = "gloo"

    def __init__(self, rank: int, port: int, world_size: int):
        super().__init__(rank)
        self.port, self.world_size = port, world_size
        self.store = self.pg = None

    def open(self) -> None:
        self.store, self.pg = _group(self.port, self.rank, self.world_size, WORKER_WAIT, False)

    def _recv_bytes(self) -> bytes:
        size = torch.empty(1, dtype=torch.int64)
        try:
            self.pg.broadcast(size, 0).wait()
            n = int(size.item())
            if n == 0:
                return b""
            data = torch.empty(n, dtype=torch.uint8)
            self.pg.broadcast(data, 0).wait()
        except RuntimeError as e:
            raise PeerGone(f"rank {self.rank}: gloo control group broken (driver gone?): {e}") from None
        return data.numpy().tobytes()

    def close(self) -> None:
        self.pg = self.store = None


CONTROL_PLANE = GlooControlPlane
