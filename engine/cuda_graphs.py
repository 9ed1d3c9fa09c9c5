"""CUDA graphs for decode steps: one graph per batch-size bucket, replayed with the batch padded up to it.

A decode step of a small model is hundreds of short kernels; launching them one by one from Python costs
more than running them. A captured graph replays them with one launch: the whole step, from the token ids
to the sampled tokens (LM head, sampler and its all-reduce included). Inputs live in static buffers; rows
past the real batch point at a spare "trash" KV block (context length 1), so padding never touches a real
sequence's cache. Where a bucket is small enough for split-KV decode attention (``paged_decode``), a second
graph is captured with it, and replayed when the batch's longest context reaches ``SPLIT_MIN_TOKENS``.
"""

from __future__ import annotations

import numpy as np
import torch

from .layers.attention import AttentionMetadata
from .step_inputs import StepInputs


def batch_buckets(max_num_seqs: int) -> list[int]:
    """1, 2, 4, 8, then every multiple of 16, and ``max_num_seqs`` itself (any value is allowed)."""
    sizes = [b for b in (1, 2, 4, 8) if b < max_num_seqs] + list(range(16, max_num_seqs, 16))
    return sorted(set(sizes + [max_num_seqs]))


class DecodeGraphs:
    """Captures ``model.forward`` for decode at every bucket size.

    Args:
        model: the rank's model (KV caches already allocated, with one spare block at ``trash_block``).
        max_num_seqs: largest batch.
        max_blocks: block-table width (ceil(max_model_len / block_size)).
        block_size, trash_block: KV-cache block size (tokens) and the spare block's id.
    """

    def __init__(self, model, max_num_seqs: int, max_blocks: int, block_size: int, trash_block: int,
                 device: torch.device):
        self.model, self.block_size, self.trash_block = model, block_size, trash_block
        n = max_num_seqs
        self.input_ids = torch.zeros(n, dtype=torch.int64, device=device)
        self.positions = torch.zeros(n, dtype=torch.int64, device=device)
        self.slot_mapping = torch.full((n,), trash_block * block_size, dtype=torch.int64, device=device)
        self.context_lens = torch.ones(n, dtype=torch.int32, device=device)
        self.block_tables = torch.full((n, max_blocks), trash_block, dtype=torch.int32, device=device)
        self.temperatures = torch.zeros(n, dtype=torch.float32, device=device)
        self.seed = torch.zeros(1, dtype=torch.int64, device=device)
        self.tokens = torch.zeros(n, dtype=torch.int64, device=device)
        self._greedy = True  # temperatures are all 0 and the seed 0: a greedy step needs no copies
        self.buckets = batch_buckets(max_num_seqs)
        self.graphs: dict[tuple[int, bool], torch.cuda.CUDAGraph] = {}  # (batch size, split KV) -> graph
        self.pool = None
        from .layers.paged_decode import num_splits_for  # Triton: CUDA machines only

        kv_heads = model.attention_layers()[0].num_kv_heads
        for bs in reversed(self.buckets):  # largest first, so the smaller ones reuse its memory pool
            for split in (False, True) if num_splits_for(bs, kv_heads, device) > 1 else (False,):
                inputs = self._inputs(bs, split)
                self._step(inputs, bs)  # warm-up outside capture (compiles kernels, sizes workspaces)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, self.pool):
                    self._step(inputs, bs)
                if self.pool is None:
                    self.pool = graph.pool()
                self.graphs[bs, split] = graph
        torch.cuda.synchronize()

    def _step(self, inputs: StepInputs, bs: int) -> None:
        self.tokens[:bs] = self.model.sample(self.model(inputs), self.temperatures[:bs], self.seed)

    def _inputs(self, bs: int, split: bool) -> StepInputs:
        attn = AttentionMetadata(slot_mapping=self.slot_mapping[:bs], block_tables=self.block_tables[:bs],
                                 q_pad_index=None, mask=None, num_seqs=bs, max_q_len=1, max_k_len=0,
                                 context_lens=self.context_lens[:bs], split_kv=split)
        return StepInputs(input_ids=self.input_ids[:bs], positions=self.positions[:bs], logits_index=None, attn=attn)

    def can_run(self, num_seqs: int) -> bool:
        return num_seqs <= self.buckets[-1]

    def run(self, inputs: StepInputs, temperatures: np.ndarray | None, seed: int) -> torch.Tensor:
        """Replay the smallest graph that holds ``inputs`` (from ``build_decode_inputs``) with the step's
        sampling inputs (``temperatures`` ``[B]`` float32, None = all greedy; ``seed``); returns the sampled
        token ids ``[B]`` int64 of the real rows (a view of a static buffer: valid until the next replay)."""
        n = inputs.input_ids.shape[0]
        bs = next(b for b in self.buckets if b >= n)
        width = inputs.attn.block_tables.shape[1]
        self.input_ids[:n] = inputs.input_ids
        self.positions[:n] = inputs.positions
        self.slot_mapping[:n] = inputs.attn.slot_mapping
        self.context_lens[:n] = inputs.attn.context_lens
        self.block_tables[:n, :width] = inputs.attn.block_tables
        if bs > n:  # padding rows: length-1 contexts in the trash block
            self.slot_mapping[n:bs] = self.trash_block * self.block_size
            self.context_lens[n:bs] = 1
            self.block_tables[n:bs, 0] = self.trash_block
        if temperatures is not None:
            self.temperatures[:n] = torch.from_numpy(np.array(temperatures, np.float32)).to(self.seed.device,
                                                                                            non_blocking=True)
            self.seed.fill_(seed)
            self._greedy = False
        elif not self._greedy:
            self.temperatures.zero_()
            self.seed.zero_()
            self._greedy = True
        self.graphs.get((bs, inputs.attn.split_kv), self.graphs[bs, False]).replay()
        return self.tokens[:n]
