"""A tensor-parallel LLM inference engine (nano-vllm's multi-process design) with a pluggable control plane.

    from engine import LLM, SamplingParams
    with LLM("/path/to/qwen3", tensor_parallel_size=2, control="shm") as llm:
        out = llm.generate([[1, 2, 3]], SamplingParams(temperature=0, max_tokens=16))

Under torchrun every rank but 0 calls ``serve_worker(EngineConfig(...))`` with the same settings instead.
"""

from runtime.cluster import DataPlaneError
from runtime.worker_group import WorkerError

from .config import ConfigError, EngineConfig
from .llm_engine import LLM
from .model_worker import serve_worker
from .sampling_params import SamplingParams

__all__ = ["LLM", "SamplingParams", "EngineConfig", "ConfigError", "WorkerError", "DataPlaneError", "serve_worker"]
