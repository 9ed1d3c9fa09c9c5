"""A tensor-parallel LLM inference engine (nano-vllm's multi-process design) with a pluggable control plane.

    from engine import LLM, SamplingParams
    with LLM("/path/to/qwen3", tensor_parallel_size=2, control="shm") as llm:
        out = llm.generate([[1, 2, 3]], SamplingParams(temperature=0, max_tokens=16))

Under torchrun every rank but 0 calls ``serve_worker(EngineConfig(...))`` with the same settings instead.
"""

from .config import ConfigError, EngineConfig
from .sequence import SamplingParams

# The rest on first use (PEP 562): reading a config imports neither torch nor the runtime.
_LAZY = {"LLM": ".llm_engine", "serve_worker": ".model_worker", "WorkerError": "runtime.worker_group",
         "DataPlaneError": "runtime.cluster"}


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'engine' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_LAZY[name], __name__), name)


__all__ = ["LLM", "SamplingParams", "EngineConfig", "ConfigError", "WorkerError", "DataPlaneError", "serve_worker"]
