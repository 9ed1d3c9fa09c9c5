"""The process runtime, between the control planes (``backends/``) and the engine, knowing nothing of models:
launching the ranks, lifelines, the worker group rank 0 watches, the ``Cluster`` that drives a run from rank 0,
and the worker's entry and command loop."""
