"""``zmq``: one ZeroMQ PUSH socket per worker (pyzmq, as vLLM's cross-node MessageQueue). Works across hosts.

Rank 0 binds each socket to a port the OS picks (no bind race). PUSH never drops: at ``hwm`` queued messages the
send waits (checking liveness, at most ``timeout_s``). One copy per worker crosses the network.
"""

from __future__ import annotations

import zmq

from common import check_int

from .base import NETWORK, ControlPlane, ControlPlaneError, PeerGone, WorkerEndpoint, wait_until


class ZmqControlPlane(ControlPlane):
    """Driver side; ``hwm``: messages a worker's queue holds before the send waits. Raises ValueError: bad hwm."""

    name = "zmq"
    scope = NETWORK
    peer = "rank"  # who a PUSH socket reaches, in the timeout's message

    @classmethod
    def check_options(cls, world_size: int, hwm) -> None:
        check_int("zmq option", "hwm", hwm, 1)

    def __init__(self, world_size: int, timeout_s: float = 60.0, hwm: int = 64, context=None):
        super().__init__(world_size, timeout_s, context)
        self.check_options(world_size, hwm)
        self._open_pushes(range(1, world_size), hwm)

    def _open_pushes(self, ranks, hwm: int) -> None:
        """A PUSH socket per rank of ``ranks``, bound on every interface to a port the OS picks."""
        self.ctx, self.pushes = zmq.Context(), {}  # rank -> (socket, port)
        for rank in ranks:
            sock = self.ctx.socket(zmq.PUSH)
            sock.setsockopt(zmq.SNDHWM, hwm)
            sock.setsockopt(zmq.LINGER, 0)
            self.pushes[rank] = sock, sock.bind_to_random_port("tcp://*")

    def endpoint(self, rank: int) -> ZmqEndpoint:
        return ZmqEndpoint(rank, self.context.host, self.pushes[rank][1])

    def _send_bytes(self, payload: bytes) -> None:
        copy = len(payload) < 65536
        for rank, (sock, _) in self.pushes.items():

            def sent(wait_s: float, sock=sock) -> bool:
                try:
                    sock.send(payload, flags=zmq.NOBLOCK, copy=copy)
                    return True
                except zmq.Again:  # the queue is full (hwm)
                    sock.poll(int(wait_s * 1000), zmq.POLLOUT)
                    return False

            wait_until(sent, self.liveness_check, self.timeout_s, lambda rank=rank: ControlPlaneError(
                f"zmq: {self.peer} {rank} took nothing for {self.timeout_s:.0f} s"))

    def close(self) -> None:
        self.ctx.destroy(linger=0)  # closes every socket, then terminates
        self.pushes = {}


class ZmqEndpoint(WorkerEndpoint):
    """Worker side: a PULL socket connected to rank 0's ``host:port``."""

    def __init__(self, rank: int, host: str, port: int):
        super().__init__(rank)
        self.host, self.port, self.ctx, self.sock = host, port, None, None

    def open(self, store=None) -> None:
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.PULL)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(f"tcp://{self.host}:{self.port}")

    def _recv_bytes(self) -> bytes:
        wait_until(lambda t: self.sock.poll(int(t * 1000), zmq.POLLIN), self.liveness_check)
        try:
            return self.sock.recv(copy=True)
        except zmq.ZMQError as e:
            raise PeerGone(f"zmq socket failed: {e}") from None

    def close(self) -> None:
        if self.ctx is not None:
            self.ctx.destroy(linger=0)
        self.sock = self.ctx = None


CONTROL_PLANE = ZmqControlPlane
