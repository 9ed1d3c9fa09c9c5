"""The ring's own CPU cost per message, with no second process: rank 0's ``send`` (stamp, pickle, copy,
crc, markers) and a worker endpoint's ``recv`` (header, copy, crc, unpickle) in one process, on an idle
ring. Medians over 20,000 messages, us. What is left of a one-way latency above this is wake-up and
cross-core transfer.

    python scripts/ring_cpu_cost.py [payload_bytes]
"""

import os
import sys
import time

from backends.ring import RingControlPlane


def main():
    size = int(sys.argv[1]) if len(sys.argv) > 1 else 256
    cp = RingControlPlane(2)
    ep = cp.endpoint(1)
    ep.open()
    payload = os.urandom(size)
    send, recv = [], []
    try:
        for _ in range(20000):
            t0 = time.perf_counter_ns()
            cp.send("noop", payload)
            t1 = time.perf_counter_ns()
            ep.recv()
            send.append(t1 - t0)
            recv.append(time.perf_counter_ns() - t1)
    finally:
        ep.close()
        cp.close()
    send.sort()
    recv.sort()
    print(f"{size} B: send p50 {send[len(send) // 2] / 1e3:.2f} us, recv p50 {recv[len(recv) // 2] / 1e3:.2f} us")


if __name__ == "__main__":
    main()
