"""Vocabulary-parallel embedding and LM head (Megatron-LM, Shoeybi et al. 2019, section 3)."""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from .gemm import linear
from .linear import check_shape
from .parallel import all_reduce, shard_range, tp_rank, tp_size


class VocabParallelEmbedding(nn.Module):
    """Each rank holds rows ``[vocab_start, vocab_end)`` of the ``[V, hidden]`` table: token ids ``[N]`` ->
    embeddings ``[N, hidden]`` (ids outside the shard look up zeros; one all_reduce sums the ranks')."""

    def __init__(self, vocab_size: int, hidden_size: int):
        super().__init__()
        self.vocab_size, self.hidden_size = vocab_size, hidden_size
        self.vocab_start, self.vocab_end = shard_range(vocab_size, "vocab_size")
        self.weight = nn.Parameter(torch.empty(self.vocab_end - self.vocab_start, hidden_size), requires_grad=False)
        self.weight.weight_loader = self.weight_loader

    def weight_loader(self, param: nn.Parameter, src) -> None:
        check_shape(src, (self.vocab_size, self.hidden_size))
        param.data.copy_(src[self.vocab_start:self.vocab_end])

    def forward(self, token_ids: torch.Tensor, previous: torch.Tensor | None = None) -> torch.Tensor:
        """token_ids ``[N]`` int64, where ``-(r + 1)`` stands for ``previous[r]`` (the last step's sampled tokens
        ``[B_prev]`` int64; None when no id is negative) -> ``[N, hidden]``."""
        if token_ids.is_cuda:
            from .embed_kernel import embed  # Triton: CUDA machines only

            y = embed(token_ids, previous, self.weight, self.vocab_start)
            return y if tp_size() == 1 else all_reduce(y)
        if previous is not None:
            token_ids = resolve_placeholders(token_ids, previous)
        if tp_size() == 1:
            return F.embedding(token_ids, self.weight)
        in_shard = (token_ids >= self.vocab_start) & (token_ids < self.vocab_end)
        local = (token_ids - self.vocab_start) * in_shard
        return all_reduce(F.embedding(local, self.weight) * in_shard.unsqueeze(-1).to(self.weight.dtype))


def resolve_placeholders(input_ids: torch.Tensor, previous: torch.Tensor) -> torch.Tensor:
    """input_ids ``[N]`` int64 where ``-(r + 1)`` stands for ``previous[r]`` (``[B_prev]`` int64, the previous
    step's sampled tokens) -> ``[N]`` int64 with the placeholders filled in, without a host sync."""
    rows = (-input_ids - 1).clamp_(min=0)
    return torch.where(input_ids < 0, previous[rows], input_ids)


class ParallelLMHead(VocabParallelEmbedding):
    """Logits over this rank's vocabulary shard: hidden ``[B, hidden]`` -> ``[B, V/tp]`` in the model's dtype,
    columns ``[vocab_start, vocab_end)``. With tied embeddings the weight is the embedding's (set by the model)."""

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return linear(hidden, self.weight)

    @staticmethod
    def gather(logits: torch.Tensor) -> torch.Tensor | None:
        """Every rank's ``[B, V/tp]`` shard -> the full ``[B, V]`` on rank 0 (None elsewhere); for tests and
        inspection, never on the serving path."""
        if tp_size() == 1:
            return logits
        parts = [torch.empty_like(logits) for _ in range(tp_size())] if tp_rank() == 0 else None
        dist.gather(logits, parts, dst=0)
        return torch.cat(parts, dim=-1) if tp_rank() == 0 else None
