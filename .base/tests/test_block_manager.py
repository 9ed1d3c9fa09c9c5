"""Block manager and scheduler: prefix caching by chained hashes, reference counts, preemption."""

from __future__ import annotations

import pytest

from engine.scheduler import BlockManager, Scheduler
from engine.sequence import SamplingParams, Sequence

BS = 16


def seq(tokens, max_tokens=8):
    return Sequence(tokens, SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True), BS)


def test_shared_prefix_reuses_blocks_and_ref_counts():
    bm = BlockManager(10, BS)
    a, b = seq(list(range(40))), seq(list(range(32)) + [99] * 8)
    bm.allocate(a)
    bm.allocate(b)
    assert a.block_table[:2] == b.block_table[:2]          # the two full shared blocks
    assert a.block_table[2] != b.block_table[2]            # the partial third block differs
    assert b.num_cached_tokens == 32 and a.num_cached_tokens == 0
    assert [bm.blocks[i].ref_count for i in a.block_table[:2]] == [2, 2]
    assert bm.num_free_blocks == 10 - 4
    bm.deallocate(a)
    assert [bm.blocks[i].ref_count for i in b.block_table[:2]] == [1, 1]
    bm.deallocate(b)
    assert bm.num_free_blocks == 10


def test_freed_blocks_keep_their_hash_for_later_hits():
    bm = BlockManager(4, BS)
    a = seq(list(range(33)))
    bm.allocate(a)
    first_two = a.block_table[:2]
    bm.deallocate(a)
    c = seq(list(range(33)))
    bm.allocate(c)
    assert c.block_table[:2] == first_two and c.num_cached_tokens == 32


def test_different_prefix_same_block_does_not_hit():
    bm = BlockManager(8, BS)
    a, b = seq(list(range(32))), seq([7] + list(range(1, 32)))
    bm.allocate(a)
    bm.allocate(b)
    assert b.num_cached_tokens == 0  # block 1 is equal, but the chained hash of its prefix is not


def test_fully_cached_prompt_recomputes_last_token():
    bm = BlockManager(4, BS)
    a, b = seq(list(range(32))), seq(list(range(32)))
    bm.allocate(a)
    bm.allocate(b)
    assert b.num_cached_tokens == 31


def test_decode_appends_block_and_registers_full_block():
    bm = BlockManager(4, BS)
    a = seq(list(range(16)))
    bm.allocate(a)
    a.token_ids.append(5)             # token 17 starts block 2
    bm.may_append(a)
    assert len(a.block_table) == 2
    for t in range(15):
        a.token_ids.append(t)
    bm.may_append(a)                  # block 2 is full now: it gets a hash
    assert bm.blocks[a.block_table[1]].hash != -1


def test_scheduler_preempts_by_recompute_and_finishes_everything():
    bm = BlockManager(5, BS)
    sched = Scheduler(max_num_seqs=8, max_num_batched_tokens=256, max_model_len=256, block_manager=bm)
    seqs = [seq([i] * 16, max_tokens=40) for i in range(1, 4)]
    for s in seqs:
        sched.add(s)
    steps = 0
    while not sched.is_finished():
        batch, _ = sched.schedule()
        positions = sched.on_launch(batch)
        sched.postprocess(batch, positions, [1] * len(batch), now_s=0.0)
        steps += 1
        assert steps < 1000
    assert sched.num_preemptions > 0
    assert all(s.num_completion_tokens == 40 for s in seqs)
    assert bm.num_free_blocks == 5


def _run_scheduler(async_scheduling: bool, num_blocks: int, eos_at: dict[int, int]):
    """Drive a scheduler as the engine does, with a fake model whose token at position p of request i is
    ``eos_at``'s EOS (0) where listed, else 1 + (7 * i + p) % 50. Checks at every launch that each
    placeholder fed to the model names a row of the previous step that belongs to the same sequence."""
    bm = BlockManager(num_blocks, BS)
    sched = Scheduler(max_num_seqs=4, max_num_batched_tokens=256, max_model_len=256, block_manager=bm,
                      eos_token_ids=frozenset({0}))
    params = [SamplingParams(temperature=0, max_tokens=30 + 5 * i, ignore_eos=False) for i in range(6)]
    seqs = [Sequence([i + 1] * (10 + 7 * i), params[i], BS) for i in range(6)]
    for s in seqs:
        sched.add(s)
    index = {s.seq_id: i for i, s in enumerate(seqs)}
    in_flight, previous = None, []
    for _ in range(2000):
        if sched.is_finished() and in_flight is None:
            break
        batch, _ = sched.schedule()
        launched = None
        if batch:
            for s in batch:
                last = s.token_ids[-1]
                assert min(s.token_ids[:-1]) >= 0
                assert last >= 0 or previous[-last - 1] is s
            positions = sched.on_launch(batch)
            tokens = [0 if eos_at.get(index[s.seq_id]) == p - s.num_prompt_tokens else
                      1 + (7 * index[s.seq_id] + p) % 50 for s, p in zip(batch, positions)]
            launched, previous = (batch, positions, tokens), batch
        if in_flight is not None:
            sched.postprocess(*in_flight, now_s=0.0)
        in_flight = launched
        if not async_scheduling and in_flight is not None:
            sched.postprocess(*in_flight, now_s=0.0)
            in_flight = None
    assert sched.is_finished() and bm.num_free_blocks == num_blocks
    for b in bm.blocks:  # every registered hash names exactly the tokens its block holds
        if b.hash != -1:
            assert len(b.token_ids) == BS and min(b.token_ids) >= 0
    return [s.completion_token_ids for s in seqs], sched.num_preemptions


@pytest.mark.parametrize("num_blocks", [6, 40])
def test_async_scheduling_gives_the_same_tokens_as_sync(num_blocks):
    eos_at = {1: 3, 4: 0, 5: 20}
    sync, _ = _run_scheduler(False, num_blocks, eos_at)
    async_, preemptions = _run_scheduler(True, num_blocks, eos_at)
    assert async_ == sync
    assert [len(t) for t in sync] == [30, 4, 40, 45, 1, 21]
    assert all(t[-1] == 0 for i, t in enumerate(sync) if i in eos_at)
    if num_blocks == 6:
        assert preemptions > 0
