"""The process runtime, between the control planes (``backends/``) and the engine: launching the ranks
(spawn or torchrun), the lifelines (death, heartbeats, reports, clocks), the worker group rank 0 watches,
the ``Cluster`` that drives a run from rank 0, and the worker's entry that joins a run and runs a body in
the one command loop. It knows nothing of models."""
