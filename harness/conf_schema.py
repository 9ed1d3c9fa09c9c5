"""The ``llm`` node's schema, generated from ``engine.EngineConfig``: the engine's defaults and types are
the command line's, written once. Registered in Hydra's ConfigStore as ``llm_schema`` (conf/config.yaml puts
it at ``llm``), so Hydra refuses an unknown ``llm.*`` key or a value of the wrong type by itself."""

from __future__ import annotations

import dataclasses

from hydra.core.config_store import ConfigStore

from engine.config import EngineConfig

# Set from the harness's own keys (model, tp, control, device, dtype, seed, cpu_threads, profile...) or
# Python-API only (launcher, fault_injection, cpu_kvcache_bytes): not under llm.
NOT_CLI = {"model", "tensor_parallel_size", "control", "control_options", "device", "dtype", "seed", "launcher",
           "cpu_threads", "fault_injection", "profile", "profile_steps", "cpu_kvcache_bytes", "hf_config"}
_TYPES = {"int": int, "float": float, "bool": bool, "str": str}
LLM_FIELDS = [f for f in dataclasses.fields(EngineConfig) if f.name not in NOT_CLI]
LLM_DEFAULTS = {f.name: f.default for f in LLM_FIELDS}
LlmConfig = dataclasses.make_dataclass(
    "LlmConfig", [(f.name, _TYPES[f.type], dataclasses.field(default=f.default)) for f in LLM_FIELDS])


def register() -> None:
    """Put the schema into Hydra's ConfigStore (idempotent); before Hydra composes conf/config.yaml."""
    ConfigStore.instance().store(name="llm_schema", node=LlmConfig)


register()
