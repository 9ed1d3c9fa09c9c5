"""CUDA graphs, token ids to sampled tokens, replayed with the step padded up to the graph's bucket; padding rows
and tokens write their K/V to a spare "trash" block. Decode: one per batch-size bucket (and split count,
``decode_splits``). Short prefills without a cached prefix, 16-bit weights (varlen flash attention, its grid
bounded by the bucket): one per bucket of new tokens (16, 32, ... up to ``MAX_PREFILL_TOKENS``); padding tokens
belong to no sequence (the cumulative lengths stop at the real tokens), padding sequences are empty."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch

from .layers.attention import AttentionMetadata
from .layers.decode_splits import num_splits, one_wave, split_counts
from .step_batch import StepBatch
from .step_inputs import StepInputs, longest_first, slot_mapping, token_layout

MAX_PREFILL_TOKENS = 2048  # new tokens in a graphed prefill
MAX_PREFILL_SEQS = 16  # sequences in a graphed prefill


def fill_decode_inputs(h: dict[str, np.ndarray], batch: StepBatch, bs: int, block_size: int, trash_block: int,
                       greedy: bool, ordered: bool = True) -> tuple[list[str], bool]:
    """Write the decode ``batch``'s inputs into host arrays ``h`` (``DecodeGraphs.static``'s fields), padded to
    ``bs`` rows of length-1 contexts in the trash block. ``greedy``: the device's temperatures and seed are 0.
    ``ordered``: the graph's attention reads ``decode_order`` (else it is neither written nor copied; ordering
    batch 1 cost ~5 us a step in call 75). Returns (the fields to copy to the device, whether those are all
    0 after it)."""
    n = batch.num_seqs
    tables = batch.block_tables()
    h["input_ids"][:n] = batch.token_ids
    h["positions"][:n] = batch.num_tokens - 1
    h["context_lens"][:n] = batch.num_tokens
    h["block_tables"][:n, :tables.shape[1]] = tables
    h["slot_mapping"][:n] = slot_mapping(tables, np.arange(n), h["positions"][:n], block_size)
    h["input_ids"][n:bs] = h["positions"][n:bs] = 0
    h["slot_mapping"][n:bs] = trash_block * block_size
    h["context_lens"][n:bs] = 1
    h["block_tables"][n:bs, 0] = trash_block
    names = ["input_ids", "positions", "slot_mapping", "context_lens", "block_tables"]
    if ordered:
        h["decode_order"][:bs] = longest_first(h["context_lens"][:bs])
        names.append("decode_order")
    if batch.temperatures is None and greedy:
        return names, True
    h["temperatures"][:bs] = 0
    if batch.temperatures is not None:
        h["temperatures"][:n] = batch.temperatures
    h["seed"][0] = batch.seed if batch.temperatures is not None else 0
    return names + ["temperatures", "seed"], batch.temperatures is None


class StagedInputs:
    """The static device buffers a set of CUDA graphs reads (``fields``: name -> (shape, dtype, fill value)),
    refilled before each replay from two pinned host copies used in turn (a pageable copy may wait for the GPU)."""

    def __init__(self, fields: dict, device: torch.device):
        self.static = {k: torch.full(shape, v, dtype=dt, device=device) for k, (shape, dt, v) in fields.items()}
        self.host = [{k: torch.full(shape, v, dtype=dt, pin_memory=True) for k, (shape, dt, v) in fields.items()}
                     for _ in range(2)]
        self.host_np = [{k: v.numpy() for k, v in h.items()} for h in self.host]
        self.copied = [torch.cuda.Event(), torch.cuda.Event()]
        self.turn = 0

    def stage(self, fill) -> None:
        """``fill(host arrays) -> {field: rows}`` writes the next pinned set; those rows go to the device."""
        host, copied = self.host[self.turn], self.copied[self.turn]
        copied.synchronize()  # this set's last copy (two replays ago) has run: it may be refilled
        rows = fill(self.host_np[self.turn])
        self.turn ^= 1
        for name, n in rows.items():
            self.static[name][:n].copy_(host[name][:n], non_blocking=True)
        copied.record()


class DecodeGraphs:
    """Captures ``model``'s decode step (KV caches allocated, a spare block at ``trash_block``) at every bucket
    up to ``max_num_seqs``; ``max_blocks``: block-table width (ceil(max_model_len / block_size))."""

    def __init__(self, model, max_num_seqs: int, max_blocks: int, block_size: int, trash_block: int,
                 device: torch.device):
        self.model, self.block_size, self.trash_block = model, block_size, trash_block
        n = max_num_seqs
        fields = {"input_ids": ((n,), torch.int64, 0), "positions": ((n,), torch.int64, 0),
                  "slot_mapping": ((n,), torch.int64, trash_block * block_size), "context_lens": ((n,), torch.int32, 1),
                  "block_tables": ((n, max_blocks), torch.int32, trash_block),
                  "decode_order": ((n,), torch.int32, 0),
                  "temperatures": ((n,), torch.float32, 0), "seed": ((1,), torch.int64, 0)}
        # input_ids holds the raw ids: a placeholder -(r + 1) is looked up in ``tokens`` inside the graph.
        self.inputs = StagedInputs(fields, device)
        self.static = self.inputs.static
        self.tokens = torch.zeros(n, dtype=torch.int64, device=device)  # the last replay's sampled tokens
        self._greedy = True  # temperatures are all 0 and the seed 0: a greedy step copies neither
        sizes = [b for b in (1, 2, 4, 8) if b < n] + list(range(16, n, 16))  # then every multiple of 16, and n
        self.buckets = sorted(set(sizes + [n]))
        self.graphs: dict[tuple[int, int], torch.cuda.CUDAGraph] = {}  # (batch size, KV splits) -> graph
        self.pool = None
        self.kv_heads, self.device = model.attention_layers()[0].num_kv_heads, device
        for bs in reversed(self.buckets):  # largest first, so the smaller ones reuse its memory pool
            for split in split_counts(bs, self.kv_heads, device):
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
        hidden = self.model(replace(inputs, previous_tokens=self.tokens))
        self.model.sample(hidden, self.static["temperatures"][:bs], self.static["seed"], out=self.tokens[:bs])

    def _inputs(self, bs: int, splits: int) -> StepInputs:
        st = self.static
        attn = AttentionMetadata(slot_mapping=st["slot_mapping"][:bs], block_tables=st["block_tables"][:bs],
                                 q_pad_index=None, mask=None, num_seqs=bs, max_q_len=1, max_k_len=0,
                                 context_lens=st["context_lens"][:bs], num_splits=splits,
                                 decode_order=st["decode_order"][:bs])
        return StepInputs(input_ids=st["input_ids"][:bs], positions=st["positions"][:bs], logits_index=None, attn=attn)

    def can_run(self, num_seqs: int) -> bool:
        return num_seqs <= self.buckets[-1]

    def key_for(self, num_seqs: int, max_context: int) -> tuple[int, int]:
        """(batch bucket, split count) of the graph that a decode step of ``num_seqs`` sequences, the longest
        ``max_context`` tokens, replays."""
        bs = next(b for b in self.buckets if b >= num_seqs)
        return bs, num_splits(bs, self.kv_heads, max_context, self.block_size, self.device)

    def graph_for(self, num_seqs: int, max_context: int) -> torch.cuda.CUDAGraph:
        return self.graphs[self.key_for(num_seqs, max_context)]

    def run(self, batch: StepBatch, previous: torch.Tensor | None) -> torch.Tensor:
        """Replay the smallest graph that holds the decode ``batch``; ``previous``: the last step's sampled
        tokens ``[B_prev]`` on the device (what ``batch``'s placeholders name). Returns the sampled token ids
        ``[B]`` int64 (a view of a static buffer: valid until the next replay)."""
        n = batch.num_seqs
        bs, splits = self.key_for(n, int(batch.num_tokens.max()))
        if previous is not None and previous.data_ptr() != self.tokens.data_ptr() and (batch.token_ids < 0).any():
            self.tokens[:len(previous)].copy_(previous)  # the last step ran outside the graphs

        ordered = not one_wave(bs * self.kv_heads * splits, self.device)  # as paged_decode_attention decides

        def fill(h: dict) -> dict:
            names, self._greedy = fill_decode_inputs(h, batch, bs, self.block_size, self.trash_block, self._greedy,
                                                     ordered)
            return dict.fromkeys(names, bs)

        self.inputs.stage(fill)
        self.graphs[bs, splits].replay()
        return self.tokens[:n]


class PrefillGraphs:
    """Captures ``model``'s prefill step (KV caches allocated, a spare block at ``trash_block``) at every bucket
    of up to ``max_tokens`` new tokens, in memory ``pool`` (the decode graphs': the two never replay at once)."""

    def __init__(self, model, max_tokens: int, block_size: int, trash_block: int, device: torch.device, pool):
        self.model, self.block_size, self.trash_block = model, block_size, trash_block
        n, s = max_tokens, MAX_PREFILL_SEQS
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
            self.graphs[t] = graph
        torch.cuda.synchronize()

    def _inputs(self, t: int) -> StepInputs:
        st = self.inputs.static
        attn = AttentionMetadata(slot_mapping=st["slot_mapping"][:t], block_tables=None, q_pad_index=None, mask=None,
                                 num_seqs=MAX_PREFILL_SEQS, max_q_len=t, max_k_len=t, prefill_spans=[],
                                 cu_seqlens=st["cu_seqlens"])
        return StepInputs(input_ids=st["input_ids"][:t], positions=st["positions"][:t],
                          logits_index=st["logits_index"], attn=attn)

    def _step(self, inputs: StepInputs) -> None:
        hidden = self.model(inputs)[inputs.logits_index]
        st = self.inputs.static
        self.model.sample(hidden, st["temperatures"], st["seed"], out=self.tokens)

    def can_run(self, batch: StepBatch) -> bool:
        """Whether ``batch`` is a prefill these graphs hold: no cached prefix, no placeholder token (a preempted
        sequence's last sample), few enough tokens and sequences."""
        return (batch.is_prefill and batch.num_seqs <= MAX_PREFILL_SEQS and len(batch.token_ids) <= self.buckets[-1]
                and np.array_equal(batch.num_new, batch.num_tokens) and int(batch.token_ids.min()) >= 0)

    def run(self, batch: StepBatch) -> torch.Tensor:
        """Replay the smallest graph that holds ``batch`` (``can_run``). Returns the sampled token ids ``[B]``
        int64 (a view of a static buffer: valid until the next replay)."""
        t = next(b for b in self.buckets if b >= len(batch.token_ids))
        self.inputs.stage(lambda h: fill_prefill_inputs(h, batch, t, self.block_size, self.trash_block))
        self.graphs[t].replay()
        return self.tokens[:batch.num_seqs]


def fill_prefill_inputs(h: dict[str, np.ndarray], batch: StepBatch, t: int, block_size: int,
                        trash_block: int) -> dict[str, int]:
    """Write the prefill ``batch``'s inputs into host arrays ``h`` (``PrefillGraphs``' fields), padded to ``t``
    tokens and ``MAX_PREFILL_SEQS`` sequences. Returns the rows of each field to copy to the device."""
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
