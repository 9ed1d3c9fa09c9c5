"""Token sampling on every rank over its own vocabulary shard: per row of its logits ``[B, V/tp]`` the best (score,
global column), greedy rows (temperature 0) scoring the logit, sampled rows ``logit / t - log(E)`` with ``E ~ Exp(1)``
drawn per (seed, row, global column), independent of tp: the argmax is a draw from softmax(logits / t) (the exponential
race, equivalent to Gumbel-max: Gumbel 1954; Maddison et al. 2014). Each pair is packed into an int64 ordered by (score,
then smaller column), so one all_reduce(MAX) of ``[B]`` int64 gives every rank every row's winner (ties: the first
column, as ``torch.argmax``)."""

from __future__ import annotations

import torch
import torch.distributed as dist

from .parallel import tp_size

_LOW32 = (1 << 32) - 1


def pack(scores: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """scores (float32) and global columns (int) of one shape -> int64 of that shape, ordered as (score,
    then smaller column): the float's bits made order-preserving as a signed int32, in the high word."""
    bits = scores.float().contiguous().view(torch.int32).to(torch.int64)
    key = torch.where(bits < 0, bits ^ 0x7FFFFFFF, bits)  # negative floats: larger magnitude, smaller key
    return key * (1 << 32) + (_LOW32 - cols.to(torch.int64))


def unpack(packed: torch.Tensor) -> torch.Tensor:
    """The global column (int64) of each packed pair."""
    return _LOW32 - (packed & _LOW32)


def sample(logits: torch.Tensor, vocab_start: int, vocab_size: int, temperatures: torch.Tensor,
           seed: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """logits ``[B, V/tp]`` (this rank's columns ``[vocab_start, vocab_start + V/tp)`` of a ``vocab_size``
    vocabulary, any float dtype), temperatures ``[B]`` float32 (0 = greedy), seed ``[1]`` int64 (keys the
    noise; 0 <= seed < 2**31), all on the logits' device -> token ids ``[B]`` int64, the same on every rank,
    written into ``out`` (``[B]`` int64, contiguous) when given. Never synchronises the device. CPU: the noise
    drawn for the whole vocabulary and sliced to the shard."""
    if logits.is_cuda:
        from .sampling_kernel import sample_shard_triton  # Triton: CUDA machines only

        if tp_size() == 1:
            return sample_shard_triton(logits, temperatures, seed, vocab_start, vocab_size, packed=False, out=out)
        best = sample_shard_triton(logits, temperatures, seed, vocab_start, vocab_size, packed=True)
    else:
        scores = logits.float()
        if bool((temperatures > 0).any()):
            gen = torch.Generator().manual_seed(int(seed[0]))
            noise = torch.empty(logits.shape[0], vocab_size).exponential_(1.0, generator=gen).log_()
            noise = noise[:, vocab_start:vocab_start + logits.shape[1]]
            t = temperatures.unsqueeze(1)
            scores = torch.where(t > 0, scores / t.clamp(min=1e-5) - noise, scores)
        col = scores.argmax(dim=1, keepdim=True)
        best = pack(scores.gather(1, col).squeeze(1), col.squeeze(1) + vocab_start)
    if tp_size() > 1:
        dist.all_reduce(best, op=dist.ReduceOp.MAX)  # NCCL or gloo, in place
    return unpack(best) if out is None else out.copy_(unpack(best))
