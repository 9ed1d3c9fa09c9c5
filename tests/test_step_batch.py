"""The step message: sequences -> flat int32 bytes -> the same arrays on every rank."""

from __future__ import annotations

import numpy as np
import pytest

from engine.sequence import SamplingParams, Sequence
from engine.step_batch import StepBatch


def seqs_with_tables(lengths, block_size=16, cached=0, temperature=1.0):
    seqs, next_block = [], 0
    for i, n in enumerate(lengths):
        s = Sequence(list(range(100 * i, 100 * i + n)), SamplingParams(temperature=temperature), block_size)
        s.block_table = list(range(next_block, next_block + s.num_blocks))
        s.num_cached_tokens = min(cached, n - 1)
        next_block += s.num_blocks
        seqs.append(s)
    return seqs


@pytest.mark.parametrize("is_prefill", [True, False])
def test_round_trip_keeps_every_field(is_prefill):
    seqs = seqs_with_tables([1, 16, 17, 40], cached=16)
    seqs[2].append_placeholder(3)  # an async placeholder travels as a negative id
    seqs[1].temperature = 0.0
    batch = StepBatch.from_bytes(StepBatch.from_sequences(seqs, is_prefill, seed=2**31 - 5).to_bytes())
    assert batch.is_prefill == is_prefill
    assert batch.seed == 2**31 - 5 and batch.temperatures.tolist() == [1.0, 0.0, 1.0, 1.0]
    assert batch.num_tokens.tolist() == [len(s) for s in seqs]
    if is_prefill:
        assert batch.token_ids.tolist() == [t for s in seqs for t in s.token_ids[s.num_cached_tokens:]]
        assert batch.num_new.tolist() == [len(s) - s.num_cached_tokens for s in seqs]
    else:
        assert batch.token_ids.tolist() == [s.token_ids[-1] for s in seqs] and batch.token_ids[2] == -4
        assert batch.num_new.tolist() == [1] * 4
    tables = batch.block_tables()
    assert tables.shape == (4, max(len(s.block_table) for s in seqs))
    for row, s in zip(tables, seqs):
        assert row[:len(s.block_table)].tolist() == s.block_table and not row[len(s.block_table):].any()
    assert batch.block_tables(width=10).shape == (4, 10)


def test_a_truncated_message_is_refused():
    data = StepBatch.from_sequences(seqs_with_tables([5, 9]), False).to_bytes()
    for bad in (data[:8], data[:-4], data + b"\0\0\0\0"):
        with pytest.raises(ValueError, match="step message"):
            StepBatch.from_bytes(bad)


def test_decode_message_is_a_few_bytes_per_sequence():
    greedy = StepBatch.from_sequences(seqs_with_tables([1024] * 256, block_size=256, temperature=0.0), False)
    data = greedy.to_bytes()
    assert len(data) == 4 * (6 + 3 * 256 + 4 * 256)  # header, 3 int32 per sequence, 4 blocks each
    assert np.frombuffer(data, "<i4")[0] == 0 and StepBatch.from_bytes(data).temperatures is None
    sampled = StepBatch.from_sequences(seqs_with_tables([1024] * 256, block_size=256, temperature=0.6), False)
    assert len(sampled.to_bytes()) == len(data) + 4 * 256  # one float32 temperature per sequence


def test_decode_builder_agrees_with_the_general_builder():
    """build_decode_inputs (the CUDA decode path) gives the same ids, positions and slots as the general
    builder on one decode step; checked here on CPU, where CI can run it."""
    import torch

    from engine.step_inputs import build_decode_inputs, build_step_inputs

    batch = StepBatch.from_bytes(StepBatch.from_sequences(seqs_with_tables([1, 16, 17, 40, 300]), False).to_bytes())
    d = build_decode_inputs(batch, 16, torch.device("cpu"))
    s = build_step_inputs(batch, 16, torch.device("cpu"))
    for a, b in ((d.input_ids, s.input_ids), (d.positions, s.positions), (d.attn.slot_mapping, s.attn.slot_mapping)):
        assert torch.equal(a, b)
    assert d.attn.context_lens.tolist() == [1, 16, 17, 40, 300]
    assert d.attn.decode_order.tolist() == [4, 3, 2, 1, 0]  # longest context first


def test_graph_inputs_agree_with_the_decode_builder():
    """The CUDA graphs' host buffers (``fill_decode_inputs``) hold what build_decode_inputs builds, padded
    rows point at the trash block, and the sampling inputs are rewritten every step."""
    import torch

    from engine.cuda_graphs import fill_decode_inputs
    from engine.step_inputs import build_decode_inputs

    seqs = seqs_with_tables([1, 16, 17, 40, 300], temperature=0.0)
    seqs[3].append_placeholder(2)
    batch = StepBatch.from_bytes(StepBatch.from_sequences(seqs, False).to_bytes())
    h = {"input_ids": np.full(8, 9, np.int64), "positions": np.zeros(8, np.int64),
         "slot_mapping": np.zeros(8, np.int64), "context_lens": np.zeros(8, np.int32),
         "block_tables": np.full((8, 32), 7, np.int32), "decode_order": np.zeros(8, np.int32),
         "temperatures": np.ones(8, np.float32), "seed": np.ones(1, np.int64)}
    fill_decode_inputs(h, batch, 16, trash_block=99)
    d = build_decode_inputs(batch, 16, torch.device("cpu"))
    assert h["input_ids"][:5].tolist() == d.input_ids.tolist() and h["input_ids"][3] < 0
    assert h["positions"][:5].tolist() == d.positions.tolist()
    assert h["slot_mapping"][:5].tolist() == d.attn.slot_mapping.tolist()
    assert h["context_lens"].tolist() == [1, 16, 17, 41, 300, 1, 1, 1]  # the placeholder is token 41
    width = d.attn.block_tables.shape[1]
    assert (h["block_tables"][:5, :width] == d.attn.block_tables.numpy()).all()
    assert h["block_tables"][5:, 0].tolist() == [99] * 3
    assert h["slot_mapping"][5:].tolist() == [99 * 16] * 3
    assert h["decode_order"].tolist() == [4, 3, 2, 1, 0, 5, 6, 7]  # ties (the padding's 1s) in batch order
    assert h["seed"][0] == 0 and not h["temperatures"].any()
    batch.temperatures, batch.seed = np.array([0.5, 0, 0, 1, 0], np.float32), 123
    fill_decode_inputs(h, batch, 16, 99)
    assert h["seed"][0] == 123 and h["temperatures"].tolist() == [0.5, 0, 0, 1, 0, 0, 0, 0]
    batch.temperatures = None  # back to greedy
    fill_decode_inputs(h, batch, 16, 99)
    assert h["seed"][0] == 0 and not h["temperatures"].any()
    h["decode_order"][:] = -1  # a launch whose programs all start at once reads no order: none is written
    fill_decode_inputs(h, batch, 16, 99, ordered=False)
    assert (h["decode_order"] == -1).all()


def test_staged_fields_are_one_aligned_prefix_per_graph():
    """Each graph's fields sit in order at 16-byte offsets, so its inputs are one copy of a prefix, and the
    typed views write where the layout says."""
    import torch

    from engine.cuda_graphs import decode_fields
    from engine.staged_inputs import ALIGN, place, views

    layout, size = place(decode_fields(3, 5, trash_slot=7, trash_block=9))
    offsets = [offset for offset, _ in layout.values()]
    assert offsets == sorted(offsets) and all(o % ALIGN == 0 for o in offsets)
    assert offsets[:3] == [0, 32, 64]  # three int64 rows, padded to 16 bytes
    assert size == layout["block_tables"][0] + 3 * 5 * 4
    buf = torch.zeros(size, dtype=torch.uint8)
    v = views(buf, layout)
    v["temperatures"][:] = 0.5
    v["block_tables"][2, 4] = 11
    assert v["temperatures"].dtype == torch.float32 and v["block_tables"].shape == (3, 5)
    assert buf[size - 4:].view(torch.int32).item() == 11
    start = layout["temperatures"][0]
    assert buf[start:start + 12].view(torch.float32).tolist() == [0.5] * 3



def test_prefill_graph_inputs_agree_with_the_prefill_builder():
    """The prefill graphs' host buffers (``fill_prefill_inputs``) hold what build_step_inputs builds for a
    prefill without cached prefix; padding tokens sit in no sequence and write the trash block; padding
    sequences are empty. The graphs take no placeholder and no cached prefix (``can_run``)."""
    import torch

    from engine.cuda_graphs import MAX_PREFILL_SEQS as MAX_SEQS
    from engine.cuda_graphs import PrefillGraphs, fill_prefill_inputs
    from engine.step_inputs import build_step_inputs

    seqs = seqs_with_tables([3, 16, 17], temperature=0.5)
    batch = StepBatch.from_bytes(StepBatch.from_sequences(seqs, True, seed=7).to_bytes())
    h = {"input_ids": np.full(64, 9, np.int64), "positions": np.full(64, 9, np.int64),
         "slot_mapping": np.zeros(64, np.int64), "cu_seqlens": np.full(MAX_SEQS + 1, 9, np.int32),
         "logits_index": np.full(MAX_SEQS, 9, np.int64), "temperatures": np.ones(MAX_SEQS, np.float32),
         "seed": np.zeros(1, np.int64)}
    fill_prefill_inputs(h, batch, 16, trash_block=99)
    s = build_step_inputs(batch, 16, torch.device("cpu"))
    assert h["input_ids"][:36].tolist() == s.input_ids.tolist() and not h["input_ids"][36:].any()
    assert h["positions"][:36].tolist() == s.positions.tolist() and not h["positions"][36:].any()
    assert h["slot_mapping"][:36].tolist() == s.attn.slot_mapping.tolist()
    assert h["slot_mapping"][36:].tolist() == [99 * 16] * 28
    assert h["cu_seqlens"].tolist() == [0, 3, 19, 36] + [36] * (MAX_SEQS - 3)
    assert h["logits_index"].tolist() == s.logits_index.tolist() + [0] * (MAX_SEQS - 3)
    assert h["temperatures"].tolist() == [0.5] * 3 + [0] * (MAX_SEQS - 3) and h["seed"][0] == 7
    graphs = object.__new__(PrefillGraphs)
    graphs.buckets = [16, 32, 64]
    assert graphs.can_run(batch)
    seqs[1].append_placeholder(0)
    assert not graphs.can_run(StepBatch.from_sequences(seqs, True))  # the placeholder
    assert not graphs.can_run(StepBatch.from_sequences(seqs_with_tables([40, 30]), True))  # 70 tokens
    assert not graphs.can_run(StepBatch.from_sequences(seqs_with_tables([1] * (MAX_SEQS + 1)), True))
    assert not graphs.can_run(StepBatch.from_sequences(seqs_with_tables([40], cached=16), True))  # a cached prefix

def test_decode_splits_give_each_program_one_tile_up_to_the_cap():
    """The split rule (H200, 132 SMs, 8 KV heads): counts in powers of two up to 4 programs per SM (one wave), at
    most 64; the fewest that leave each program one tile of cached tokens: 64 tokens (or one block, if smaller),
    128 for one split at batch 1 and 2 query heads per KV head (``launch``)."""
    import torch

    from engine.layers.decode_splits import launch, max_splits, num_splits, one_wave, split_counts

    cpu = torch.device("cpu")  # 132 SMs off CUDA
    assert [max_splits(b, 8, cpu) for b in (1, 2, 3, 4, 8, 16, 64, 80)] == [64, 33, 22, 16, 8, 4, 1, 1]
    assert all(one_wave(b * 8 * max_splits(b, 8, cpu), cpu) for b in range(1, 67))  # no program waits for a slot
    assert split_counts(1, 8, cpu) == [1, 2, 4, 8, 16, 32, 64]
    assert split_counts(2, 8, cpu) == [1, 2, 4, 8, 16, 32, 33] and split_counts(80, 8, cpu) == [1]
    # contexts count the new token: at batch 1 one split takes one 128-token tile (group 2), more splits 64 tokens
    assert [num_splits(1, 8, 2, n, 256, cpu) for n in (1, 65, 66, 96, 129, 130, 513, 4097, 40000)] == \
        [1, 1, 1, 1, 1, 4, 8, 64, 64]
    assert [num_splits(1, 8, 4, n, 256, cpu) for n in (65, 66, 129)] == [1, 2, 2]  # the 8B's group: 64 tokens
    assert [num_splits(2, 8, 2, n, 256, cpu) for n in (65, 66, 129)] == [1, 2, 2]  # 64-token tiles past batch 1
    assert launch(1, 1, 2, 256) == (128, 8)
    assert launch(1, 2, 2, 256) == launch(2, 1, 2, 256) == launch(1, 1, 4, 256) == (64, 2)
    assert launch(1, 1, 2, 64) == (64, 2) and launch(1, 1, 2, 16) == (16, 2)  # a tile never spans two blocks
    assert num_splits(1, 8, 2, 96, 16, cpu) == 8  # 16-token blocks: 95 cached tokens are 6 tiles
    assert num_splits(2, 8, 2, 4097, 256, cpu) == 33 and num_splits(128, 8, 2, 40000, 256, cpu) == 1
    assert num_splits(4, 8, 2, 4097, 256, cpu) == 16  # was 17: 544 programs, and the 17th split of each held no token
