"""The vocabulary-shard sampler's packing: one int64 per (score, column), ordered as the argmax wants."""

from __future__ import annotations

import torch

from engine.layers.sampler import pack, sample, unpack


def test_packing_orders_by_score_then_first_column():
    scores = torch.tensor([-float("inf"), -3.5, -1.0, -0.0, 0.0, 1e-30, 2.0, 2.0, float("inf")])
    cols = torch.tensor([7, 1, 151935, 4, 3, 9, 12, 5, 0])
    packed = pack(scores, cols)
    assert unpack(packed).tolist() == cols.tolist()
    order = packed.argsort().tolist()
    # -0.0 sorts just below +0.0 (both are zero; either is a fine winner), equal 2.0s: column 5 above 12
    assert [cols[i].item() for i in order] == [7, 1, 151935, 4, 3, 9, 12, 5, 0]


def test_shards_agree_with_the_whole_vocabulary():
    """Splitting the logits over 'ranks' and taking the max of their packed winners gives the same token as
    sampling the whole row at once, greedy and sampled (the tp=1 path, here without processes)."""
    torch.manual_seed(0)
    logits = torch.randn(6, 1000)
    logits[2, 10] = logits[2, 700] = logits[2].max() + 1  # a tie across shards: the first column wins
    temps = torch.tensor([0.0, 0.7, 0.0, 1.0, 2.0, 0.0])
    seed = torch.tensor([123])
    whole = sample(logits, 0, 1000, temps, seed)
    assert whole[2] == 10 and whole[[0, 5]].tolist() == logits[[0, 5]].argmax(1).tolist()
    for tp in (2, 4):
        shard = 1000 // tp
        best = None
        for r in range(tp):
            part = logits[:, r * shard:(r + 1) * shard]
            # sample() with no process group returns the shard's own winner; unpacking the max of packed
            # winners is what the all_reduce(MAX) does across ranks
            tok = sample(part, r * shard, 1000, temps, seed)
            scores = _score_of(logits, temps, seed, tok)
            p = pack(scores, tok)
            best = p if best is None else torch.maximum(best, p)
        assert unpack(best).tolist() == whole.tolist(), tp


def _score_of(logits, temps, seed, tok):
    gen = torch.Generator().manual_seed(int(seed[0]))
    noise = torch.empty(logits.shape).exponential_(1.0, generator=gen).log_()
    rows = torch.arange(len(tok))
    raw = logits[rows, tok]
    return torch.where(temps > 0, raw / temps.clamp(min=1e-5) - noise[rows, tok], raw)
