"""One rank's share of the model: process group, weights, KV cache and the forward step."""

from __future__ import annotations

import contextlib
import gc
import logging
import math
import mmap
import os
from collections.abc import Callable

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed import PrefixStore

from runtime.launch import init_group

from .config import EngineConfig
from .cuda_graphs import MAX_PREFILL_TOKENS, DecodeGraphs, PrefillGraphs
from .layers.all_reduce import make_all_reduce
from .layers.attention import varlen_causal
from .layers.decode_splits import num_splits
from .layers.embed_head import ParallelLMHead
from .layers.gemm import set_gemm
from .layers.parallel import set_all_reduce
from .layers.pdl import set_pdl
from .loader import load_weights
from .models.qwen3 import Qwen3ForCausalLM
from .step_batch import StepBatch
from .step_inputs import build_decode_inputs, build_step_inputs

log = logging.getLogger("engine")


def zeros(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """``torch.zeros``; on CPU in anonymous memory, which the OS zero-fills page by page as it is first touched
    (``torch.zeros`` writes every byte up front: 2 s for the default 2 GiB KV cache of a CPU rank)."""
    numel = math.prod(shape)
    if device.type != "cpu" or numel == 0:
        return torch.zeros(shape, dtype=dtype, device=device)
    return torch.frombuffer(mmap.mmap(-1, numel * dtype.itemsize), dtype=dtype).view(shape)


class ModelRunner:
    """Rank ``rank``'s model shard and KV cache; every rank calls :meth:`run` with the same arguments each step
    (SPMD). ``store``: the run's TCPStore; ``sync(stage)``: called with "joining" (before the process group
    forms) and "loaded" (weights in, before the KV cache's sizing collective; on CUDA the all-reduce choice ran
    two collectives already): workers announce it, rank 0 waits for them, watching that they are alive.
    ``local_rank``: this rank's GPU (default: ``rank``); ``num_nodes``: nodes the ranks run on."""

    def __init__(self, config: EngineConfig, rank: int, store: dist.Store, sync: Callable[[str], None],
                 local_rank: int | None = None, num_nodes: int = 1):
        self.config, self.rank = config, rank
        self.graphs = self.prefill_graphs = None
        self.sampled: torch.Tensor | None = None  # the last step's sampled token ids [B] int64 on the device
        self.world_size, self.block_size = config.tensor_parallel_size, config.kvcache_block_size
        if config.device == "cuda":
            self.device = torch.device("cuda", rank if local_rank is None else local_rank)
            torch.cuda.set_device(self.device)
        else:
            self.device = torch.device("cpu")
            torch.set_num_threads(config.cpu_threads or max(1, (os.cpu_count() or 1) // self.world_size))
        self.cpu_threads = torch.get_num_threads() if self.device.type == "cpu" else None  # None on CUDA
        sync("joining")
        init_group("nccl" if config.device == "cuda" else "gloo", PrefixStore("data", store), rank, self.world_size,
                   config.timeout_s)
        try:
            self._build(sync, num_nodes)
        except BaseException:
            with contextlib.suppress(Exception):  # a dead peer's group may fail to close: keep the first error
                self.exit()  # leave the group, free what was built: this process may start another engine
            raise

    def _build(self, sync: Callable[[str], None], num_nodes: int) -> None:
        config, rank, hf = self.config, self.rank, self.config.hf_config
        largest = max(config.max_num_batched_tokens, config.max_num_seqs) * hf["hidden_size"]
        impl = make_all_reduce(config.all_reduce, self.world_size, self.device, config.torch_dtype, largest, num_nodes)
        set_all_reduce(impl)
        self.all_reduce = impl.name if impl is not None else "none"  # symm_mem, nccl, gloo; none at tp=1
        # triton (a GEMV at batch 1), cublas or torch (CPU); +pdl
        self.gemm = set_gemm(config.gemm, self.device) + ("+pdl" if set_pdl(config.pdl, self.device) else "")
        if rank == 0 and self.gemm.startswith("triton"):
            log.info("linear layers: a Triton GEMV at batch 1, cuBLAS above")
        self.model = self._load_model()
        sync("loaded")
        self.kv_heads, self.head_dim = hf["num_key_value_heads"] // self.world_size, hf["head_dim"]
        self.group = hf["num_attention_heads"] // hf["num_key_value_heads"]  # query heads per KV head
        self.num_layers, self.max_blocks = hf["num_hidden_layers"], math.ceil(config.max_model_len / self.block_size)
        if rank == 0:
            log.info("sizing the KV cache%s", " (a warm-up prefill measures the activations)" if
                     config.device == "cuda" and config.num_kvcache_blocks < 0 else "")
        num_blocks = torch.tensor([self._local_num_blocks()], dtype=torch.int64, device=self.device)
        dist.all_reduce(num_blocks, op=dist.ReduceOp.MIN)
        self.num_kvcache_blocks = int(num_blocks.item())  # the minimum over ranks
        if self.num_kvcache_blocks < 1:
            raise RuntimeError("no memory left for the KV cache (lower max_num_batched_tokens / max_num_seqs "
                               "or raise gpu_memory_utilization)")
        self._allocate_kv_cache(self.num_kvcache_blocks)
        if config.device == "cuda" and not config.enforce_eager:
            if rank == 0:
                log.info("compiling the fused kernels and capturing CUDA graphs (decode batch sizes up to %d, "
                         "short prefills)", config.max_num_seqs)
            if config.compile:
                self.model.ops.use_compiled()
            self.graphs = DecodeGraphs(self.model, config.max_num_seqs, self.max_blocks, self.block_size,
                                       self.num_kvcache_blocks, self.device)
            if config.torch_dtype in (torch.float16, torch.bfloat16) and varlen_causal() is not None:
                self.prefill_graphs = PrefillGraphs(self.model, min(MAX_PREFILL_TOKENS, config.max_num_batched_tokens),
                                                    self.block_size, self.num_kvcache_blocks, self.device,
                                                    self.graphs.pool)

    def _load_model(self) -> Qwen3ForCausalLM:
        prev_dtype = torch.get_default_dtype()
        torch.set_default_dtype(self.config.torch_dtype)
        try:
            with torch.device(self.device):
                model = Qwen3ForCausalLM(self.config.hf_config)
        finally:
            torch.set_default_dtype(prev_dtype)
        if self.rank == 0:
            log.info("loading rank 0's shard of %s", self.config.model)
        load_weights(model, self.config.model)
        if self.gemm.startswith("triton"):  # for the batch-1 GEMVs that scale by 1 / rms (gemm.linear_add)
            model.fold_norms()
        return model.eval()

    def _local_num_blocks(self) -> int:
        cfg = self.config
        if cfg.num_kvcache_blocks > 0:
            return cfg.num_kvcache_blocks
        useful = cfg.max_num_seqs * self.max_blocks
        # bytes of one KV block on this rank: K and V, all layers, local KV heads
        block_bytes = 2 * self.num_layers * self.block_size * self.kv_heads * self.head_dim * cfg.torch_dtype.itemsize
        if cfg.device == "cpu":
            return max(1, min(useful, cfg.cpu_kvcache_bytes // block_bytes))
        return min(useful, self._cuda_budget_bytes() // block_bytes)

    def _cuda_budget_bytes(self) -> int:
        """GPU bytes left for the KV cache: ``total * gpu_memory_utilization`` minus what is in use, the peak of
        a warm-up prefill of as many ``max_model_len``-token sequences as ``max_num_batched_tokens`` holds (at most
        ``max_num_seqs``) and 1 GiB for the decode graphs' activations."""
        cfg = self.config
        seq_len, nb = cfg.max_model_len, self.max_blocks  # (EngineConfig: max_num_batched_tokens >= max_model_len)
        num_seqs = min(cfg.max_num_seqs, cfg.max_num_batched_tokens // seq_len)
        warmup = StepBatch(True, np.full(num_seqs, seq_len, np.int32), np.full(num_seqs, seq_len, np.int32),
                           np.zeros(num_seqs * seq_len, np.int32), np.full(num_seqs, nb, np.int32),
                           np.arange(num_seqs * nb, dtype=np.int32))
        torch.cuda.synchronize()
        self._allocate_kv_cache(math.ceil(cfg.max_num_batched_tokens / self.block_size) + cfg.max_num_seqs)
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        self.run(warmup.to_bytes())
        activation_peak = torch.cuda.max_memory_allocated() - base
        self._allocate_kv_cache(0)
        torch.cuda.empty_cache()
        free, total = torch.cuda.mem_get_info()
        return int(total * cfg.gpu_memory_utilization - (total - free) - activation_peak - (1 << 30))

    def _allocate_kv_cache(self, num_blocks: int) -> None:
        # On CUDA one spare block more: the "trash" block that padded CUDA-graph rows write to.
        spare = 1 if self.config.device == "cuda" and num_blocks else 0
        shape = (num_blocks + spare, self.block_size, self.kv_heads, self.head_dim)
        for attn in self.model.attention_layers():
            attn.k_cache, attn.v_cache = (zeros(shape, self.config.torch_dtype, self.device) for _ in "kv")

    def _last_hidden(self, batch: StepBatch) -> torch.Tensor:
        """Each sequence's last-token hidden state ``[B, hidden]``, eager; placeholders read from ``self.sampled``."""
        decode_cuda = not batch.is_prefill and self.device.type == "cuda"
        if decode_cuda:
            inputs = build_decode_inputs(batch, self.block_size, self.device)
            inputs.attn.num_splits = num_splits(batch.num_seqs, self.kv_heads, self.group, inputs.attn.max_k_len,
                                                self.block_size, self.device)
        else:
            inputs = build_step_inputs(batch, self.block_size, self.device)
        if batch.token_ids.min() < 0:
            inputs.previous_tokens = self.sampled
        hidden = self.model(inputs)
        return hidden if decode_cuda else hidden[inputs.logits_index]

    @torch.inference_mode()
    def run(self, step: bytes) -> torch.Tensor:
        """One forward step with sampling over ``step`` (``StepBatch.to_bytes()``): the sampled token ids ``[num_seqs]``
        int64 on the device, equal on every rank, kept in ``self.sampled``. Raises ValueError: a malformed message."""
        batch = StepBatch.from_bytes(step)
        if not batch.is_prefill and self.graphs is not None and self.graphs.can_run(batch.num_seqs):
            tokens = self.graphs.run(batch, self.sampled)
        elif self.prefill_graphs is not None and self.prefill_graphs.can_run(batch):
            tokens = self.prefill_graphs.run(batch)
        else:
            hidden = self._last_hidden(batch)
            temps = torch.zeros(batch.num_seqs) if batch.temperatures is None else torch.tensor(batch.temperatures)
            seed = torch.tensor([batch.seed], dtype=torch.int64)
            tokens = self.model.sample(hidden, temps.to(self.device, non_blocking=True),
                                       seed.to(self.device, non_blocking=True))
        self.sampled = tokens
        return tokens

    @torch.inference_mode()
    def logits(self, step: bytes) -> torch.Tensor | None:
        """The full-vocabulary logits ``[num_seqs, vocab]`` (model dtype) of each sequence's last token on
        rank 0, None elsewhere: eager, gathered from every rank's shard; for tests and inspection."""
        hidden = self._last_hidden(StepBatch.from_bytes(step))
        return ParallelLMHead.gather(self.model.compute_logits(hidden))

    def exit(self) -> None:
        """Free the CUDA graphs, the model and the KV cache (even while this runner is still referenced: the next
        engine in this process needs that memory), and leave the data-plane process group (idempotent)."""
        self.graphs = self.prefill_graphs = self.sampled = self.model = None
        gc.collect()  # each parameter's weight_loader refers back to its layer: a cycle
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        if dist.is_initialized():
            dist.destroy_process_group()
