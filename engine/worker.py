"""The worker process (ranks 1..tp-1): build a model runner, then execute rank 0's commands until exit."""

from __future__ import annotations

import multiprocessing as mp
import signal
import sys
import traceback
from datetime import timedelta

from torch.distributed import TCPStore

from backends import EXIT, PeerGone, WorkerEndpoint
from backends.base import ControlStats

from .config import EngineConfig

REPORT_CONTROL_STATS = "report_control_stats"


def worker_main(config: EngineConfig, rank: int, endpoint: WorkerEndpoint, store_port: int, reports) -> None:
    """Entry point of a spawned worker.

    Reports go to rank 0 on the ``reports`` queue: ``("error", rank, traceback_text)`` when anything
    raises; ``("stats", rank, recv_stats)`` when asked by REPORT_CONTROL_STATS (without that message's
    own sample; the samples then restart). The worker leaves on EXIT, when its parent dies (checked
    while it waits for a command), or on an error. SIGINT is ignored so that Ctrl-C is handled by rank 0
    alone, which then shuts the workers down.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent = mp.parent_process()

    def driver_alive() -> None:
        if parent is not None and not parent.is_alive():
            raise PeerGone(f"rank {rank}: the driver (rank 0) exited")

    runner, code = None, 0
    try:
        endpoint.liveness_check = driver_alive
        endpoint.open()
        store = TCPStore("127.0.0.1", store_port, config.tensor_parallel_size, is_master=False,
                         timeout=timedelta(seconds=config.timeout_s))
        from .model_runner import ModelRunner  # after the handshake objects: keeps spawn start-up errors early

        runner = ModelRunner(config, rank, store, lambda stage: store.set(f"{stage}/{rank}", "1"))
        while True:
            method, args = endpoint.recv()
            if method == EXIT:
                break
            if method == REPORT_CONTROL_STATS:
                stats, endpoint.recv_stats = endpoint.recv_stats, ControlStats()
                stats.nbytes.pop()
                stats.ns.pop()
                reports.put(("stats", rank, stats.as_dict()))
                continue
            getattr(runner, method)(*args)
    except PeerGone:
        code = 1
    except BaseException:
        code = 1
        reports.put(("error", rank, traceback.format_exc()))
    finally:
        if runner is not None:
            try:
                runner.exit()
            except Exception:
                pass
        endpoint.close()
    reports.close()
    reports.join_thread()
    sys.exit(code)
