"""``zmq``: one ZeroMQ PUSH socket per worker (pyzmq, as vLLM's cross-node MessageQueue). Works across hosts.

Rank 0 binds each socket to a port the OS picks (no bind race); each worker's endpoint carries its port. PUSH
never drops: a message waits in the socket's queue until the worker's PULL takes it, and at ``hwm`` queued
messages the send waits (checking liveness, at most ``timeout_s``). One copy per worker crosses the network.
"""

from __future__ import annotations

import zmq

from common import check_int

from .base import NETWORK, ControlPlane, ControlPlaneError, PeerGone, WorkerEndpoint, wait_until


def push_socket(ctx: zmq.Context, hwm: int) -> tuple[zmq.Socket, int]:
    """A PUSH socket bound on every interface to an OS-chosen port; returns (socket, port)."""
    sock = ctx.socket(zmq.PUSH)
    sock.setsockopt(zmq.SNDHWM, hwm)
    sock.setsockopt(zmq.LINGER, 0)
    sock.bind("tcp://*:*")
    port = int(sock.getsockopt_string(zmq.LAST_ENDPOINT).rsplit(":", 1)[1])
    return sock, port


def send_all(sock: zmq.Socket, payload: bytes, check, timeout_s: float, who: str) -> None:
    """Queue ``payload`` on ``sock``, waiting (``check`` every POLL_S) while its queue is full. Raises
    ControlPlaneError: still full after ``timeout_s``; or from ``check``."""

    def sent(wait_s: float) -> bool:
        try:
            sock.send(payload, flags=zmq.NOBLOCK, copy=len(payload) < 65536)
            return True
        except zmq.Again:
            sock.poll(int(wait_s * 1000), zmq.POLLOUT)
            return False

    wait_until(sent, check, timeout_s, lambda: ControlPlaneError(f"zmq: {who} took nothing for {timeout_s:.0f} s"))


class ZmqControlPlane(ControlPlane):
    """Driver side. Args: see :class:`ControlPlane`; ``hwm``: messages a worker's queue holds before rank 0's
    send waits. Raises ValueError: a bad option."""

    name = "zmq"
    scope = NETWORK

    @classmethod
    def check_options(cls, world_size: int, hwm) -> None:
        check_int("zmq option", "hwm", hwm, 1)

    def __init__(self, world_size: int, timeout_s: float = 60.0, hwm: int = 64, context=None):
        super().__init__(world_size, timeout_s, context)
        self.check_options(world_size, hwm)
        self.ctx = zmq.Context()
        pairs = [push_socket(self.ctx, hwm) for _ in range(self.num_workers)]
        self.socks, self.ports = [s for s, _ in pairs], [p for _, p in pairs]

    def endpoint(self, rank: int) -> ZmqEndpoint:
        return ZmqEndpoint(rank, self.context.host, self.ports[rank - 1])

    def _send_bytes(self, payload: bytes) -> None:
        for rank, sock in enumerate(self.socks, start=1):
            send_all(sock, payload, self.liveness_check, self.timeout_s, f"rank {rank}")

    def close(self) -> None:
        for sock in self.socks:
            sock.close(linger=0)
        self.socks = []
        self.ctx.term()


class ZmqEndpoint(WorkerEndpoint):
    """Worker side: a PULL socket connected to rank 0's ``host:port``."""

    def __init__(self, rank: int, host: str, port: int):
        super().__init__(rank)
        self.host, self.port = host, port
        self.ctx = self.sock = None

    def open(self, store=None) -> None:
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.PULL)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(f"tcp://{self.host}:{self.port}")

    def _recv_bytes(self) -> bytes:
        self._wait(lambda t: self.sock.poll(int(t * 1000), zmq.POLLIN))
        try:
            return self.sock.recv(copy=True)
        except zmq.ZMQError as e:
            raise PeerGone(f"zmq socket failed: {e}") from None

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close(linger=0)
            self.ctx.term()
        self.sock = self.ctx = None


CONTROL_PLANE = ZmqControlPlane
