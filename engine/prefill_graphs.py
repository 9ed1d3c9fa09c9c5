"""CUDA graphs for short prefills without a cached prefix, 16-bit weights (varlen flash attention, its grid
bounded by the bucket): one per bucket of new tokens (16, 32, ... up to ``MAX_TOKENS``), replayed with the step
padded up to it. Padding tokens belong to no sequence (the cumulative lengths stop at the real tokens) and write
their K/V to the spare "trash" block; padding sequences are empty, their sampled tokens dropped."""

from __future__ import annotations

import numpy as np
import torch

from .cuda_graphs import StagedInputs
from .layers.attention import AttentionMetadata
from .step_batch import StepBatch
from .step_inputs import StepInputs, slot_mapping, token_layout

MAX_TOKENS = 2048  # new tokens in a graphed prefill
MAX_SEQS = 16  # sequences in a graphed prefill


class PrefillGraphs:
    """Captures ``model``'s prefill step (KV caches allocated, a spare block at ``trash_block``) at every bucket
    of up to ``max_tokens`` new tokens, in memory ``pool`` (the decode graphs': the two never replay at once)."""

    def __init__(self, model, max_tokens: int, block_size: int, trash_block: int, device: torch.device, pool=None):
        self.model, self.block_size, self.trash_block = model, block_size, trash_block
        n, s = max_tokens, MAX_SEQS
        self.inputs = StagedInputs({
            "input_ids": ((n,), torch.int64, 0), "positions": ((n,), torch.int64, 0),
            "slot_mapping": ((n,), torch.int64, trash_block * block_size), "cu_seqlens": ((s + 1,), torch.int32, 0),
            "logits_index": ((s,), torch.int64, 0), "temperatures": ((s,), torch.float32, 0),
            "seed": ((1,), torch.int64, 0)}, device)
        self.tokens = torch.zeros(s, dtype=torch.int64, device=device)  # the last replay's sampled tokens
        self.buckets = [b for b in (16 << i for i in range(12)) if b < max_tokens] + [max_tokens]
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        for t in reversed(self.buckets):  # largest first, so the smaller ones reuse its memory
            inputs = self._inputs(t)
            self._step(inputs)  # warm-up outside capture (compiles kernels, sizes workspaces)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool):
                self._step(inputs)
            pool = pool if pool is not None else graph.pool()
            self.graphs[t] = graph
        torch.cuda.synchronize()

    def _inputs(self, t: int) -> StepInputs:
        st = self.inputs.static
        attn = AttentionMetadata(slot_mapping=st["slot_mapping"][:t], block_tables=None, q_pad_index=None, mask=None,
                                 num_seqs=MAX_SEQS, max_q_len=t, max_k_len=t, prefill_spans=[],
                                 cu_seqlens=st["cu_seqlens"])
        return StepInputs(input_ids=st["input_ids"][:t], positions=st["positions"][:t],
                          logits_index=st["logits_index"], attn=attn)

    def _step(self, inputs: StepInputs) -> None:
        hidden = self.model(inputs)[inputs.logits_index]
        st = self.inputs.static
        self.tokens.copy_(self.model.sample(hidden, st["temperatures"], st["seed"]))

    def can_run(self, batch: StepBatch) -> bool:
        """Whether ``batch`` is a prefill these graphs hold: no cached prefix, no placeholder token (a preempted
        sequence's last sample), few enough tokens and sequences."""
        return (batch.is_prefill and batch.num_seqs <= MAX_SEQS and len(batch.token_ids) <= self.buckets[-1]
                and np.array_equal(batch.num_new, batch.num_tokens) and int(batch.token_ids.min()) >= 0)

    def run(self, batch: StepBatch) -> torch.Tensor:
        """Replay the smallest graph that holds ``batch`` (``can_run``). Returns the sampled token ids ``[B]``
        int64 (a view of a static buffer: valid until the next replay)."""
        n, total = batch.num_seqs, len(batch.token_ids)
        t = next(b for b in self.buckets if b >= total)
        self.inputs.stage(lambda h: fill_prefill_inputs(h, batch, t, self.block_size, self.trash_block))
        self.graphs[t].replay()
        return self.tokens[:n]


def fill_prefill_inputs(h: dict[str, np.ndarray], batch: StepBatch, t: int, block_size: int,
                        trash_block: int) -> dict[str, int]:
    """Write the prefill ``batch``'s inputs into host arrays ``h`` (``PrefillGraphs``' fields), padded to ``t``
    tokens and ``MAX_SEQS`` sequences. Returns the rows of each field to copy to the device."""
    n, total = batch.num_seqs, len(batch.token_ids)
    seq_of, _, positions, ends = token_layout(batch)
    h["input_ids"][:total], h["input_ids"][total:t] = batch.token_ids, 0
    h["positions"][:total], h["positions"][total:t] = positions, 0
    h["slot_mapping"][:total] = slot_mapping(batch.block_tables(), seq_of, positions, block_size)
    h["slot_mapping"][total:t] = trash_block * block_size
    h["cu_seqlens"][0], h["cu_seqlens"][1:n + 1], h["cu_seqlens"][n + 1:] = 0, ends, total
    h["logits_index"][:n], h["logits_index"][n:] = ends - 1, 0
    h["temperatures"][:] = 0
    if batch.temperatures is not None:
        h["temperatures"][:n] = batch.temperatures
    h["seed"][0] = batch.seed if batch.temperatures is not None else 0
    seqs = len(h["logits_index"])
    return {"input_ids": t, "positions": t, "slot_mapping": t, "cu_seqlens": seqs + 1, "logits_index": seqs,
            "temperatures": seqs, "seed": 1}
