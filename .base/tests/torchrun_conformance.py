"""Run by torchrun in the multi-node tests: the conformance check of a control plane across nodes. Rank 0
sends COUNT messages of random sizes (some spanning several ring slots) with their sha256; every other rank
checks order and checksum and reports (received, errors) to rank 0, which writes the reports as JSON.

    torchrun ... tests/torchrun_conformance.py CONTROL OUT.json [COUNT]
"""

import hashlib
import json
import os
import random
import sys

from runtime.cluster import make_control_plane
from runtime.launch import Launch
from runtime.worker import serve
from runtime.worker_group import WorkerGroup

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from control_plane_worker import check_messages  # noqa: E402

OPTIONS = {"hybrid": {"nslots": 4, "slot_bytes": 4096}}


def check_body(joined) -> int:
    received, errors = check_messages(joined.endpoint)
    joined.lifeline.send("stats", {"received": received, "errors": errors})
    return 0


def main(control: str, out: str, count: str = "2000") -> int:
    launch = Launch.from_env()
    if launch.rank != 0:
        return serve(launch, check_body, (), 120.0)
    group = WorkerGroup(launch.world_size, 60.0, 120.0, launch)
    cp = make_control_plane(control, OPTIONS.get(control, {}), launch.world_size, 60.0, group.context)
    group.start(cp, check_body)
    rng, blob = random.Random(5), random.randbytes(20000)
    for i in range(int(count)):
        n = rng.choice((0, 1, 100, 3000, 5000, 20000))
        start = rng.randrange(0, 20000 - n + 1)
        payload = blob[start:start + n]
        cp.send("check", i, payload, hashlib.sha256(payload).hexdigest())
    cp.send_exit()
    reports = group.collect_stats()
    group.join()
    cp.close()
    json.dump({"nodes": group.context.num_nodes, "reports": {str(r): v for r, v in reports.items()}}, open(out, "w"))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
