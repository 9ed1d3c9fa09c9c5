"""The worker side of the control-plane conformance tests (a module of its own so spawn can import it).

The driver sends ``("check", index, payload, sha256)``; the worker verifies order and checksum of every
message and reports ``(rank, received, errors)`` on the result queue when the exit message arrives.
"""

from __future__ import annotations

import hashlib
import multiprocessing as mp

from backends import EXIT, PeerGone


def echo_worker(endpoint, results) -> None:
    parent = mp.parent_process()

    def alive():
        if not parent.is_alive():
            raise PeerGone("driver gone")

    endpoint.liveness_check = alive
    endpoint.open()
    received, errors = 0, []
    try:
        while True:
            method, args = endpoint.recv()
            if method == EXIT:
                break
            index, payload, digest = args
            if index != received:
                errors.append(f"message {received} arrived as {index}")
            if hashlib.sha256(payload).hexdigest() != digest:
                errors.append(f"message {index} ({len(payload)} B) is corrupt")
            received += 1
    finally:
        endpoint.close()
    results.put((endpoint.rank, received, errors[:5]))
