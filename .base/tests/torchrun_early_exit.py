"""Run by torchrun in the multi-node tests: every rank but 0 exits before it joins (as a node's rank that fails in
its imports or its checks); rank 0 builds the LLM, waits aloud, writes the error it raised and exits 1.

    torchrun ... tests/torchrun_early_exit.py CHECKPOINT OUT.txt STARTUP_TIMEOUT_S
"""

import os
import sys

from engine import LLM


def main(path: str, out: str, startup_timeout_s: str) -> int:
    if os.environ["RANK"] != "0":
        return 3
    try:
        LLM(path, control="zmq", tensor_parallel_size=int(os.environ["WORLD_SIZE"]), device="cpu", dtype="float32",
            startup_timeout_s=float(startup_timeout_s))
    except Exception as e:  # what the test checks
        open(out, "w").write(f"{type(e).__name__}: {e}")
    return 1  # (not 0: torchrun's agent would wait 300 s at its exit barrier for node 1, gone)


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
