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
from .staged_inputs import StagedInputs
from .step_batch import StepBatch
from .step_inputs import StepInputs, longest_first, slot_mapping, token_layout

MAX_PREFILL_TOKENS = 2048  # new tokens in a graphed prefill
MAX_PREFILL_SEQS = 16  # sequences in a graphed prefill


def decode_fields(bs: int, max_blocks: int, trash_slot: int, trash_block: int) -> dict:
    """The decode graph of ``bs`` rows reads these (``StagedInputs`` fields; input_ids holds the raw ids: a
    placeholder -(r + 1) is looked up in the last replay's tokens inside the graph)."""
    return {"input_ids": ((bs,), torch.int64, 0), "positions": ((bs,), torch.int64, 0),
            "slot_mapping": ((bs,), torch.int64, trash_slot), "temperatures": ((bs,), torch.float32, 0),
            "seed": ((1,), torch.int64, 0), "context_lens": ((bs,), torch.int32, 1),
            "decode_order": ((bs,), torch.int32, 0), "block_tables": ((bs, max_blocks), torch.int32, trash_block)}


def fill_decode_inputs(h: dict[str, np.ndarray], batch: StepBatch, block_size: int, trash_block: int,
                       ordered: bool = True) -> None:
    """Write the decode ``batch``'s inputs into host arrays ``h`` (``decode_fields``), padded to their rows with
    length-1 contexts in the trash block. ``ordered``: the graph's attention reads ``decode_order`` (else it is not
    written: ordering batch 1 cost ~5 us a step in call 75)."""
    n = batch.num_seqs
    tables = batch.block_tables()
    h["input_ids"][:n] = batch.token_ids
    h["positions"][:n] = batch.num_tokens - 1
    h["context_lens"][:n] = batch.num_tokens
    h["block_tables"][:n, :tables.shape[1]] = tables  # columns past a context: never read (masked in the kernel)
    h["slot_mapping"][:n] = slot_mapping(tables, np.arange(n), h["positions"][:n], block_size)
    h["input_ids"][n:] = h["positions"][n:] = 0
    h["slot_mapping"][n:] = trash_block * block_size
    h["context_lens"][n:] = 1
    h["block_tables"][n:, 0] = trash_block
    if ordered:
        h["decode_order"][:] = longest_first(h["context_lens"])
    h["temperatures"][:] = 0
    if batch.temperatures is not None:
        h["temperatures"][:n] = batch.temperatures
    h["seed"][0] = batch.seed if batch.temperatures is not None else 0


class DecodeGraphs:
    """Captures ``model``'s decode step (KV caches allocated, a spare block at ``trash_block``) at every bucket
    up to ``max_num_seqs``; ``max_blocks``: block-table width (ceil(max_model_len / block_size))."""

    def __init__(self, model, max_num_seqs: int, max_blocks: int, block_size: int, trash_block: int,
                 device: torch.device):
        self.model, self.block_size, self.trash_block = model, block_size, trash_block
        n = max_num_seqs
        self.tokens = torch.zeros(n, dtype=torch.int64, device=device)  # the last replay's sampled tokens
        self.buckets = [b for b in (1, 2, 4, 8) if b < n] + list(range(16, n, 16)) + [n]  # every multiple of 16, n
        self.inputs = StagedInputs({bs: decode_fields(bs, max_blocks, trash_block * block_size, trash_block)
                                    for bs in self.buckets}, device)
        self.graphs: dict[tuple[int, int], torch.cuda.CUDAGraph] = {}  # (batch size, KV splits) -> graph
        self.pool = None
        attn = model.attention_layers()[0]
        self.kv_heads, self.group, self.device = attn.num_kv_heads, attn.num_heads // attn.num_kv_heads, device
        for bs in reversed(self.buckets):  # largest first, so the smaller ones reuse its memory pool
            st = self.inputs.static(bs)
            for split in split_counts(bs, self.kv_heads, device):
                inputs = self._inputs(st, split)
                self._step(inputs, st)  # warm-up outside capture (compiles kernels, sizes workspaces)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, self.pool):
                    self._step(inputs, st)
                if self.pool is None:
                    self.pool = graph.pool()
                self.graphs[bs, split] = graph
        torch.cuda.synchronize()

    def _step(self, inputs: StepInputs, st: dict) -> None:
        hidden = self.model(replace(inputs, previous_tokens=self.tokens))
        self.model.sample(hidden, st["temperatures"], st["seed"], out=self.tokens[:len(st["input_ids"])])

    @staticmethod
    def _inputs(st: dict, splits: int) -> StepInputs:
        attn = AttentionMetadata(slot_mapping=st["slot_mapping"], block_tables=st["block_tables"], q_pad_index=None,
                                 mask=None, num_seqs=len(st["input_ids"]), max_q_len=1, max_k_len=0,
                                 context_lens=st["context_lens"], num_splits=splits, decode_order=st["decode_order"])
        return StepInputs(input_ids=st["input_ids"], positions=st["positions"], logits_index=None, attn=attn)

    def can_run(self, num_seqs: int) -> bool:
        return num_seqs <= self.buckets[-1]

    def key_for(self, num_seqs: int, max_context: int) -> tuple[int, int]:
        """(batch bucket, split count) of the graph that a decode step of ``num_seqs`` sequences, the longest
        ``max_context`` tokens, replays."""
        bs = next(b for b in self.buckets if b >= num_seqs)
        return bs, num_splits(bs, self.kv_heads, self.group, max_context, self.block_size, self.device)

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
        self.inputs.stage(bs, lambda h: fill_decode_inputs(h, batch, self.block_size, self.trash_block, ordered))
        self.graphs[bs, splits].replay()
        return self.tokens[:n]


class PrefillGraphs:
    """Captures ``model``'s prefill step (KV caches allocated, a spare block at ``trash_block``) at every bucket
    of up to ``max_tokens`` new tokens, in memory ``pool`` (the decode graphs': the two never replay at once)."""

    def __init__(self, model, max_tokens: int, block_size: int, trash_block: int, device: torch.device, pool):
        self.model, self.block_size, self.trash_block = model, block_size, trash_block
        s = MAX_PREFILL_SEQS
        self.tokens = torch.zeros(s, dtype=torch.int64, device=device)  # the last replay's sampled tokens
        self.buckets = [b for b in (16 << i for i in range(12)) if b < max_tokens] + [max_tokens]
        self.inputs = StagedInputs({t: {
            "input_ids": ((t,), torch.int64, 0), "positions": ((t,), torch.int64, 0),
            "slot_mapping": ((t,), torch.int64, trash_block * block_size), "cu_seqlens": ((s + 1,), torch.int32, 0),
            "logits_index": ((s,), torch.int64, 0), "temperatures": ((s,), torch.float32, 0),
            "seed": ((1,), torch.int64, 0)} for t in self.buckets}, device)
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        for t in reversed(self.buckets):  # largest first, so the smaller ones reuse its memory
            st = self.inputs.static(t)
            inputs = self._inputs(st)
            self._step(inputs, st)  # warm-up outside capture (compiles kernels, sizes workspaces)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool):
                self._step(inputs, st)
            self.graphs[t] = graph
        torch.cuda.synchronize()

    @staticmethod
    def _inputs(st: dict) -> StepInputs:
        t = len(st["input_ids"])
        attn = AttentionMetadata(slot_mapping=st["slot_mapping"], block_tables=None, q_pad_index=None, mask=None,
                                 num_seqs=MAX_PREFILL_SEQS, max_q_len=t, max_k_len=t, prefill_spans=[],
                                 cu_seqlens=st["cu_seqlens"])
        return StepInputs(input_ids=st["input_ids"], positions=st["positions"], logits_index=st["logits_index"],
                          attn=attn)

    def _step(self, inputs: StepInputs, st: dict) -> None:
        hidden = self.model(inputs)[inputs.logits_index]
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
        self.inputs.stage(t, lambda h: fill_prefill_inputs(h, batch, self.block_size, self.trash_block))
        self.graphs[t].replay()
        return self.tokens[:batch.num_seqs]


def fill_prefill_inputs(h: dict[str, np.ndarray], batch: StepBatch, block_size: int, trash_block: int) -> None:
    """Write the prefill ``batch``'s inputs into host arrays ``h`` (``PrefillGraphs``' fields), padded to their
    tokens and ``MAX_PREFILL_SEQS`` sequences."""
    n, total = batch.num_seqs, len(batch.token_ids)
    seq_of, _, positions, ends = token_layout(batch)
    h["input_ids"][:total], h["input_ids"][total:] = batch.token_ids, 0
    h["positions"][:total], h["positions"][total:] = positions, 0
    h["slot_mapping"][:total] = slot_mapping(batch.block_tables(), seq_of, positions, block_size)
    h["slot_mapping"][total:] = trash_block * block_size
    h["cu_seqlens"][0], h["cu_seqlens"][1:n + 1], h["cu_seqlens"][n + 1:] = 0, ends, total
    h["logits_index"][:n], h["logits_index"][n:] = ends - 1, 0
    h["temperatures"][:] = 0
    if batch.temperatures is not None:
        h["temperatures"][:n] = batch.temperatures
    h["seed"][0] = batch.seed if batch.temperatures is not None else 0
