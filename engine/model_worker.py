"""The engine's worker body (``runtime/worker.py`` joins the run and calls it), its fault drill, torchrun's entry."""

from __future__ import annotations

from array import array

from runtime.worker import Joined, command_loop, serve

from .profiling import ProfiledEndpoint, ProfiledRunner, make_profiler

FAULT_DRILL = "fault_drill"  # (rank, message): that rank raises RuntimeError(message); needs config.fault_injection


def fault_drill(config, rank: int, target: int, message: str) -> None:
    """A drill: rank ``target`` raises ``RuntimeError(message)``, as a worker failing mid-run. Raises RuntimeError
    on rank ``target``, or on every rank without ``config.fault_injection``."""
    if not config.fault_injection:
        raise RuntimeError("fault drill refused: the engine was built without fault_injection=True")
    if rank == target:
        raise RuntimeError(message)


def serve_worker(config) -> int:
    """Under torchrun, on every rank but 0: serve the engine rank 0 builds with an equal ``EngineConfig`` until
    it shuts down; returns the exit code (0; 1: a failure reported to rank 0; 2: rank 0 refused the config; 130:
    stopped by a signal). Raises ValueError: this process was not started by torchrun, or it is rank 0."""
    launch = config.launch
    if launch is None or launch.rank == 0:
        raise ValueError("serve_worker() is for ranks 1..tp-1 started by torchrun; rank 0 builds the LLM")
    return serve(launch, model_worker, (config, launch.local_rank), config.startup_timeout_s, agree=config.agreed())


def model_worker(joined: Joined, config, local_rank: int | None) -> int:
    """A model runner for the joined rank (``cuda:local_rank``), then rank 0's commands until EXIT; its report adds
    ``launch_ns``: per ``run`` step, rank 0's send to this ``run()`` returning (ns, rank 0's clock; not in replays)."""
    from .model_runner import ModelRunner

    rank, store, endpoint = joined.rank, joined.store, joined.endpoint
    runner = ModelRunner(config, rank, store, lambda stage: store.set(f"{stage}/{rank}", "1"), local_rank,
                         num_nodes=len(set(joined.node_of)))
    profiler = make_profiler(config, rank)
    if profiler is not None:
        endpoint, runner = ProfiledEndpoint(endpoint, profiler), ProfiledRunner(runner, profiler, worker=True)
    launched = array("q")  # launch_ns

    def handle(method: str, args: tuple) -> None:
        if method == FAULT_DRILL:
            return fault_drill(config, rank, *args)
        getattr(runner, method)(*args)
        if method == "run" and (ns := endpoint.ns_since_send()) is not None:
            launched.append(ns)

    def report() -> dict:
        sent, launched[:] = launched.tolist(), array("q")
        return {"launch_ns": sent}

    try:
        return command_loop(endpoint, joined.lifeline, handle, report)
    finally:
        runner.exit()
        if profiler is not None:
            profiler.close()
