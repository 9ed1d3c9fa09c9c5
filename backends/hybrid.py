"""``hybrid``: a shared-memory ring inside each node, and one network hop (zmq) per other node.

Rank 0 writes each message into its node's ring and pushes it over zmq to the leader (lowest rank) of every
other node, which republishes it into its own node's ring (named to the node's ranks through the run's store):
the network carries one copy per node. Nodes come from the context's ``node_of``; on one node this is a ring.
"""

from __future__ import annotations

from common import check_int

from .base import NETWORK, ControlPlane, WorkerEndpoint
from .ring import RingControlPlane, RingEndpoint, RingWriter
from .segments import unlink_name
from .zmq import ZmqControlPlane, ZmqEndpoint

KEY = "control/hybrid/node{}"  # store key of node k's ring segment name (set by its leader)


class HybridControlPlane(RingControlPlane, ZmqControlPlane):
    """Driver side: a ring's (its options: every node's ring) and a zmq PUSH socket's per other node (``hwm``: a
    leader's queue). Raises ValueError: a bad option, or several nodes without a store in the context."""

    name = "hybrid"
    scope = NETWORK
    peer = "node leader rank"

    @classmethod
    def check_options(cls, world_size: int, nslots, slot_bytes, spin_us, idle_ms, sleep_us, hwm) -> None:
        super().check_options(world_size, nslots, slot_bytes, spin_us, idle_ms, sleep_us)  # a node's most readers
        check_int("hybrid option", "hwm", hwm, 1)

    def __init__(self, world_size: int, timeout_s: float = 60.0, nslots: int = 16, slot_bytes: int = 1 << 18,
                 spin_us: float = 200.0, idle_ms: float = 50.0, sleep_us: float = 2000.0, hwm: int = 64,
                 context=None):
        ControlPlane.__init__(self, world_size, timeout_s, context)
        self.node_of = list(self.context.node_of) or [0] * world_size
        self.groups = {node: [r for r, n in enumerate(self.node_of) if n == node] for node in self.node_of}
        if len(self.groups) > 1 and self.context.store is None:
            raise ValueError("hybrid across nodes needs the run's store in its context")
        self.check_options(world_size, nslots, slot_bytes, spin_us, idle_ms, sleep_us, hwm)
        self.check_timing(timeout_s, sleep_us)
        self._open_ring(self.groups[self.node_of[0]][1:], (nslots, slot_bytes, (spin_us, idle_ms, sleep_us)))
        self._open_pushes([ranks[0] for node, ranks in self.groups.items() if node != self.node_of[0]], hwm)

    def endpoint(self, rank: int) -> WorkerEndpoint:
        if rank in self.readers:
            return super().endpoint(rank)
        ranks, key = self.groups[self.node_of[rank]], KEY.format(self.node_of[rank])
        if rank == ranks[0]:
            return LeaderEndpoint(rank, self.context.host, self.pushes[rank][1], key, self.ring_args, len(ranks) - 1,
                                  self.timeout_s)
        return RingEndpoint(rank, None, self.ring_args, len(ranks) - 1, ranks.index(rank) - 1, key=key,
                            timeout_s=self.context.startup_timeout_s)

    def _send_bytes(self, payload: bytes) -> None:
        ZmqControlPlane._send_bytes(self, payload)  # remote nodes first: their hop is the longer one
        RingControlPlane._send_bytes(self, payload)

    def close(self) -> None:
        ZmqControlPlane.close(self)
        RingControlPlane.close(self)


class LeaderEndpoint(ZmqEndpoint):
    """Another node's leader: rank 0's messages come in over zmq (from ``host:port``) and go on into a ring of its
    node for its ``num_readers`` followers, whose segment name it sets in the run's store under ``key``. Once every
    follower has read the first message, it unlinks that name: a SIGKILL of the leader then leaves none on its node.
    """

    def __init__(self, rank: int, host: str, port: int, key: str, ring_args: tuple, num_readers: int, timeout_s: float):
        super().__init__(rank, host, port)
        self.key, self.ring_args, self.num_readers, self.timeout_s = key, ring_args, num_readers, timeout_s
        self.writer, self.named = None, False

    def open(self, store=None) -> None:
        super().open()
        if self.num_readers:
            self.writer, self.named = RingWriter(self.num_readers, *self.ring_args), True
            store.set(self.key, self.writer.name)

    def _recv_bytes(self) -> bytes:
        payload = super()._recv_bytes()
        if self.writer is not None:
            self.writer.write(payload, self.liveness_check, self.timeout_s)
            if self.named and self.writer.read_by_all(1):  # every follower holds the ring: a SIGKILL leaves no name
                unlink_name(self.writer.shm)
                self.named = False
        return payload

    def close(self) -> None:
        super().close()
        if self.writer is not None:
            self.writer.close()


CONTROL_PLANE = HybridControlPlane
