"""EngineConfig, validated before anything is spawned, and a Qwen3 checkpoint's config.json as the engine reads it."""

from __future__ import annotations

import json
import os
from dataclasses import MISSING, dataclass, field, fields

from backends import available as available_control_planes
from common import ConfigError, is_int, is_number

from .profiling import parse_window, profile_problem

# torch is imported where needed: checking a config (the harness checks every job up front) does not import it.
CPU_DTYPES = ("float32", "bfloat16")
CUDA_DTYPES = ("float32", "bfloat16", "float16")
MAX_SEED = 2**63 - 1  # a signed int64 (torch's generators take up to 2**64 - 1)
MAX_CPU_THREADS = 1024  # per rank; far past any host's cores, short of where creating the threads fails
MAX_WAIT_S = 1_000_000  # timeout_s, startup_timeout_s: 11.6 days, past a day-long serve trace
REQUIRED_HF_KEYS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                    "intermediate_size", "vocab_size", "rms_norm_eps", "max_position_embeddings")
MODEL_KEYS = ("model_type", *REQUIRED_HF_KEYS, "head_dim", "rope_theta", "tie_word_embeddings", "attention_bias",
              "eos_token_id", "generation_eos_token_id")  # what the engine reads of read_hf_config: the model to it
FIELD_TYPES = {"int": (is_int, "an integer"), "float": (is_number, "a finite number"),
               "bool": (lambda v: isinstance(v, bool), "true or false"),
               "str": (lambda v: isinstance(v, str), "a string")}


def torch_dtype(name: str):
    """The torch dtype called ``name`` (one of ``CUDA_DTYPES``)."""
    import torch

    return getattr(torch, name)


def resolve_device(device: str) -> str:
    """``auto`` -> ``cuda`` where CUDA is available, else ``cpu``; other values unchanged."""
    if device == "auto":
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def placement_problem(device: str, tp: int, launch, count_gpus: bool = True) -> str | None:
    """Why ``tp`` ranks cannot run on ``device`` (auto, cpu or cuda) as launched, or None: torchrun (``launch``, a
    ``runtime.launch.Launch``; None: spawned) started another number, CUDA is missing, or this host has fewer GPUs
    than its ranks (``count_gpus``). The engine and the harness's checks before the first job both ask it."""
    if launch is not None and tp != launch.world_size:
        return (f"tp={tp} but torchrun started WORLD_SIZE={launch.world_size} ranks: tp must equal nnodes x "
                f"nproc-per-node")
    if resolve_device(device) != "cuda":
        return None
    import torch

    if not torch.cuda.is_available():
        return "device=cuda but CUDA is not available here (use device=cpu or auto)"
    local, n = launch.local_world_size if launch else tp, torch.cuda.device_count()
    return f"{local} ranks on this host need as many GPUs; {n} visible" if count_gpus and local > n else None


def resolve_dtype(dtype: str, device: str) -> str:
    """``auto`` -> ``bfloat16`` on CUDA, ``float32`` on CPU; other values unchanged."""
    return ("bfloat16" if device == "cuda" else "float32") if dtype == "auto" else dtype


def split_problem(hf: dict, tp: int, where: str) -> str | None:
    """Why ``tp`` cannot shard the attention heads, KV heads, MLP or vocabulary of ``hf`` (read from ``where``), or
    why its KV heads do not group its query heads; None when both work."""
    if hf["num_attention_heads"] % hf["num_key_value_heads"]:
        return (f"num_key_value_heads={hf['num_key_value_heads']} does not divide num_attention_heads="
                f"{hf['num_attention_heads']} of {where} (each KV head serves a whole group of query heads)")
    for key in ("num_attention_heads", "num_key_value_heads", "intermediate_size", "vocab_size"):
        if hf[key] % tp:
            return f"tensor_parallel_size={tp} does not divide {key}={hf[key]} of {where}"
    return None


def batch_tokens_problem(max_num_batched_tokens: int, max_model_len: int, hf: dict) -> str | None:
    """Why a prefill batch of ``max_num_batched_tokens`` cannot hold one sequence of ``max_model_len`` tokens
    (capped by ``hf``'s max_position_embeddings): the scheduler would never admit that sequence."""
    longest = min(max_model_len, hf["max_position_embeddings"])
    if max_num_batched_tokens < longest:
        return f"max_num_batched_tokens={max_num_batched_tokens} must be >= max_model_len={longest}"
    return None


def read_hf_config(path: str) -> dict:
    """``path/config.json`` of a Qwen3 checkpoint, ``head_dim`` and ``rope_theta`` filled in (transformers 5 keeps
    the latter in ``rope_parameters``), and generation_config.json's eos ids. Raises ConfigError: a missing directory,
    config.json or safetensors file, not Qwen3, a required key missing or mistyped, RoPE scaling (unsupported)."""
    if os.path.isfile(path):
        raise ConfigError(f"{path} is a file, not a checkpoint directory")
    if not os.path.isdir(path):
        raise ConfigError(f"checkpoint directory not found: {path}")
    cfg_path = os.path.join(path, "config.json")
    if not os.path.isfile(cfg_path):
        raise ConfigError(f"no config.json in checkpoint directory {path}")
    try:
        with open(cfg_path) as f:
            hf = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise ConfigError(f"cannot read {cfg_path}: {e}") from None
    if not isinstance(hf, dict):
        raise ConfigError(f"{cfg_path} is not a JSON object")
    if hf.get("model_type") != "qwen3":
        raise ConfigError(f"{cfg_path}: model_type {hf.get('model_type')!r} is not supported (only 'qwen3')")
    if missing := [k for k in REQUIRED_HF_KEYS if k not in hf]:
        raise ConfigError(f"{cfg_path} lacks {', '.join(missing)}")
    if bad := [k for k in REQUIRED_HF_KEYS if k != "rms_norm_eps" and (not is_int(hf[k]) or hf[k] < 1)]:
        raise ConfigError(f"{cfg_path}: {bad[0]} must be a positive integer, got {hf[bad[0]]!r}")
    if not any(name.endswith(".safetensors") for name in os.listdir(path)):
        raise ConfigError(f"no *.safetensors file in checkpoint directory {path}")
    hf.setdefault("head_dim", hf["hidden_size"] // hf["num_attention_heads"])
    rope = hf.get("rope_parameters") or hf.get("rope_scaling") or {}
    if rope.get("rope_type", rope.get("type", "default")) != "default":
        raise ConfigError(f"{cfg_path}: RoPE scaling {rope} is not supported")
    hf["rope_theta"] = float(rope.get("rope_theta", hf.get("rope_theta", 10000.0)))
    hf.setdefault("tie_word_embeddings", False)
    if not is_number(hf["rms_norm_eps"]) or hf["rms_norm_eps"] <= 0:
        raise ConfigError(f"{cfg_path}: rms_norm_eps must be a number > 0, got {hf['rms_norm_eps']!r}")
    if not isinstance(hf["tie_word_embeddings"], bool):
        raise ConfigError(f"{cfg_path}: tie_word_embeddings must be true or false, got {hf['tie_word_embeddings']!r}")
    gen_path = os.path.join(path, "generation_config.json")
    if os.path.isfile(gen_path):
        try:
            with open(gen_path) as f:
                hf["generation_eos_token_id"] = json.load(f).get("eos_token_id")
        except (OSError, json.JSONDecodeError, AttributeError) as e:
            raise ConfigError(f"cannot read {gen_path}: {e}") from None
    for key, where in (("eos_token_id", cfg_path), ("generation_eos_token_id", gen_path)):
        eos = hf.get(key)
        if eos is not None and not (is_int(eos) or isinstance(eos, list) and all(is_int(i) for i in eos)):
            raise ConfigError(f"{where}: eos_token_id must be a token id or a list of them, got {eos!r}")
    return hf


@dataclass
class EngineConfig:
    """Everything an engine run needs; each rank gets a copy. Times in s."""

    model: str  # directory of a Hugging Face Qwen3 checkpoint (config.json + *.safetensors)
    tensor_parallel_size: int = 1  # ranks, one per device; divides the heads, KV heads, intermediate and vocab
    control: str = "shm"  # control-plane backend (backends.available())
    control_options: dict = field(default_factory=dict)  # extra keyword arguments of its constructor
    device: str = "auto"  # auto (cuda when available), cpu or cuda
    dtype: str = "auto"  # auto (bfloat16 on cuda, float32 on cpu), float32, bfloat16 or float16 (cuda only)
    kvcache_block_size: int = 256  # tokens per KV-cache block, a power of two in [16, 256]
    num_kvcache_blocks: int = -1  # KV blocks per rank; -1: sized from memory (the minimum over ranks)
    gpu_memory_utilization: float = 0.9  # fraction of GPU memory the engine may fill: weights, activations, KV
    cpu_kvcache_bytes: int = 2 << 30  # KV-cache budget per rank on CPU when num_kvcache_blocks is -1
    max_num_seqs: int = 512  # most sequences in one batch
    max_num_batched_tokens: int = 16384  # most tokens in one prefill batch (>= max_model_len)
    max_model_len: int = 4096  # longest sequence, prompt + output (tokens); capped by max_position_embeddings
    enforce_eager: bool = False  # never capture CUDA graphs (nor compile)
    compile: bool = True  # on CUDA without enforce_eager, fuse the small elementwise functions with torch.compile
    async_scheduling: bool = True  # launch step N+1 before reading step N's tokens (vLLM's async scheduling)
    all_reduce: str = "auto"  # CUDA: auto (symm_mem where every rank can, else nccl), nccl or symm_mem; CPU: gloo
    gemm: str = "auto"  # CUDA: auto (a Triton GEMV at batch 1 if Triton imports, else cublas), triton or cublas
    pdl: bool = True  # programmatic dependent launch of the Triton decode kernels where the GPU has it (pdl.py)
    timeout_s: float = 60.0  # longest wait on another process in a step: control-plane acks, collectives
    startup_timeout_s: float = 600.0  # longest wait for the workers to start and load their shards
    seed: int = 0  # seed of rank 0's sampling generator
    launcher: str = "auto"  # auto (torchrun if it started this process, else spawn), spawn or torchrun
    cpu_threads: int = 0  # torch threads per rank on CPU; 0: the host's cores / tp
    fault_injection: bool = False  # allow LLM.inject_fault drills (tests, chaos runs)
    profile: str = "none"  # or "torch": a Chrome trace per rank of each armed pass, NVTX ranges (profiling.py)
    profile_steps: str | int | None = None  # an armed pass's steps to record: "FIRST-LAST" or "N", from 0; None: all
    hf_config: dict = field(default_factory=dict, repr=False)  # the checkpoint's config.json (read_hf_config)

    def __post_init__(self) -> None:
        if isinstance(self.model, os.PathLike):
            self.model = os.fspath(self.model)
        self._check_values()
        self.model = os.path.abspath(os.path.expanduser(self.model))
        self.hf_config = read_hf_config(self.model)
        if self.tensor_parallel_size < 1:
            raise ConfigError(f"tensor_parallel_size must be an integer >= 1, got {self.tensor_parallel_size!r}")
        if problem := split_problem(self.hf_config, self.tensor_parallel_size, self.model):
            raise ConfigError(problem)
        if self.control not in available_control_planes():
            raise ConfigError(f"unknown control plane {self.control!r}; "
                              f"available: {', '.join(available_control_planes())}")
        self._check_launcher()
        self.device = resolve_device(self.device)
        if self.device not in ("cpu", "cuda"):
            raise ConfigError(f"device must be auto, cpu or cuda, got {self.device!r}")
        if problem := placement_problem(self.device, self.tensor_parallel_size, self.launch):
            raise ConfigError(problem)
        self._check_kernels_and_dtype()
        if problem := batch_tokens_problem(self.max_num_batched_tokens, self.max_model_len, self.hf_config):
            raise ConfigError(problem)
        self.max_model_len = min(self.max_model_len, self.hf_config["max_position_embeddings"])

    @property
    def torch_dtype(self):
        return torch_dtype(self.dtype)

    @property
    def eos_token_ids(self) -> frozenset[int]:
        """Every end-of-sequence id of config.json and generation_config.json, as transformers' generate stops on."""
        found = (self.hf_config.get("eos_token_id"), self.hf_config.get("generation_eos_token_id"))
        return frozenset(int(i) for eos in found if eos is not None for i in (eos if isinstance(eos, list) else [eos]))

    def _check_values(self) -> None:
        """Types and the ranges that need no checkpoint (the others: ``__post_init__``)."""
        for f in fields(self):
            is_type, kind = FIELD_TYPES.get(f.type, (None, ""))
            if is_type is not None and not is_type(getattr(self, f.name)):
                raise ConfigError(f"{f.name} must be {kind}, got {getattr(self, f.name)!r}")
        for name in ("max_model_len", "max_num_seqs", "max_num_batched_tokens"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not 0 <= self.cpu_threads <= MAX_CPU_THREADS:
            raise ConfigError(f"cpu_threads must be 0 (cores / tp) or 1-{MAX_CPU_THREADS}, got {self.cpu_threads}")
        if not 0 <= self.seed <= MAX_SEED:
            raise ConfigError(f"seed must be an integer in [0, 2^63 - 1], got {self.seed}")
        if self.num_kvcache_blocks != -1 and self.num_kvcache_blocks < 1:
            raise ConfigError(f"num_kvcache_blocks must be -1 (size from memory) or >= 1, "
                              f"got {self.num_kvcache_blocks}")
        for name in ("timeout_s", "startup_timeout_s"):  # shorter fails on a busy host: no benchmark runs that
            if not 1 <= getattr(self, name) <= MAX_WAIT_S:  # longer overflows timedelta and C ints, after start-up
                raise ConfigError(f"{name} must be in [1, {MAX_WAIT_S:,}] (s), got {getattr(self, name):g}")
        if problem := profile_problem(self.profile):
            raise ConfigError(problem)
        parse_window(self.profile_steps)
        bs = self.kvcache_block_size
        if not (16 <= bs <= 256 and bs & (bs - 1) == 0):
            raise ConfigError(f"kvcache_block_size must be a power of two in [16, 256], got {bs}")
        if not 0 < self.gpu_memory_utilization <= 1:
            raise ConfigError(f"gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization}")

    def agreed(self) -> dict:
        """What every rank's copy must hold alike under torchrun (the runtime compares them at start-up): every field
        but ``model``, a path that may differ between hosts, whose MODEL_KEYS and weight files' names and sizes stand
        in for it (not the values: two presets of one shape differ only in ``seed``; nor config.json as written: a
        preset written by another transformers release is the same model)."""
        alike = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("model", "hf_config")}
        files = sorted(f for f in os.listdir(self.model) if f.endswith(".safetensors"))
        alike["weights"] = [(f, os.path.getsize(os.path.join(self.model, f))) for f in files]
        return {**alike, "hf_config": {k: self.hf_config.get(k) for k in MODEL_KEYS}}

    @property
    def launch(self):
        """The torchrun ``launch.Launch`` of this process, or None when rank 0 spawns the workers."""
        from runtime.launch import Launch

        return Launch.from_env() if self.launcher == "torchrun" else None

    def _check_launcher(self) -> None:
        from runtime.launch import Launch

        env = Launch.from_env()
        if self.launcher == "auto":
            self.launcher = "torchrun" if env is not None else "spawn"
        if self.launcher not in ("spawn", "torchrun"):
            raise ConfigError(f"launcher must be auto, spawn or torchrun, got {self.launcher!r}")
        if self.launcher == "torchrun" and env is None:
            raise ConfigError("launcher=torchrun but this process was not started by torchrun "
                              "(RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT are not all set)")

    def _check_kernels_and_dtype(self) -> None:
        """``all_reduce``, ``gemm`` and ``dtype`` (resolved) for ``device`` (resolved)."""
        if self.all_reduce not in ("auto", "nccl", "symm_mem"):
            raise ConfigError(f"all_reduce must be auto, nccl or symm_mem, got {self.all_reduce!r}")
        if self.all_reduce != "auto" and self.device != "cuda":
            raise ConfigError(f"all_reduce={self.all_reduce} needs device=cuda (CPU runs all-reduce with gloo)")
        if self.gemm not in ("auto", "cublas", "triton"):
            raise ConfigError(f"gemm must be auto, cublas or triton, got {self.gemm!r}")
        if self.gemm != "auto" and self.device != "cuda":
            raise ConfigError(f"gemm={self.gemm} needs device=cuda (CPU runs use torch's matmul)")
        self.dtype = resolve_dtype(self.dtype, self.device)
        allowed = CUDA_DTYPES if self.device == "cuda" else CPU_DTYPES
        if self.dtype not in allowed:
            raise ConfigError(f"dtype {self.dtype!r} is not supported on {self.device}; use auto, "
                              f"{', '.join(sorted(allowed))}")

    @classmethod
    def refuse_unknown(cls, settings: dict) -> None:
        """Raises ConfigError naming the ``settings`` that are no EngineConfig field."""
        if unknown := set(settings) - {f.name for f in fields(cls)}:
            raise ConfigError(f"unknown EngineConfig setting(s): {', '.join(sorted(unknown))}")

    @classmethod
    def check_settings(cls, **settings) -> None:
        """The checks of ``settings`` over the defaults that need no checkpoint (types, ranges, kernels, dtype).
        Raises ConfigError: an unknown name, or the first setting the engine would refuse."""
        cls.refuse_unknown(settings)
        cfg = object.__new__(cls)
        vars(cfg).update({f.name: f.default_factory() if f.default_factory is not MISSING else f.default
                          for f in fields(cls)} | {"model": ""} | settings)  # model: checked when the job runs
        cfg._check_values()
        cfg.device = resolve_device(cfg.device)
        cfg._check_kernels_and_dtype()
