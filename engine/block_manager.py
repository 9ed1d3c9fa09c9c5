"""Paged KV-cache bookkeeping on rank 0: block allocation, reference counts and prefix caching (vLLM's, simplified):
a full block is identified by hash(previous block's hash, its token ids), its token ids compared too. A freed
block keeps its hash and contents until handed out again, for a later request with that prefix."""

from __future__ import annotations

from collections import deque

from .sequence import Sequence

NO_HASH = -1


def block_hash(token_ids: list[int], prefix_hash: int) -> int:
    """Chained hash of one full block; ``prefix_hash`` is the previous block's (NO_HASH for the first)."""
    return hash((prefix_hash, tuple(token_ids)))


class Block:
    """One KV-cache block: its id, how many sequences hold it, the hash of its full content (NO_HASH: not full)."""
    def __init__(self, block_id: int):
        self.block_id, self.ref_count, self.hash = block_id, 0, NO_HASH
        self.token_ids: list[int] = []


class BlockManager:
    """Hands out ``num_blocks`` KV blocks of ``block_size`` tokens to sequences."""

    def __init__(self, num_blocks: int, block_size: int):
        self.block_size = block_size
        self.blocks = [Block(i) for i in range(num_blocks)]
        self.hash_to_block: dict[int, int] = {}
        self.free_block_ids: deque[int] = deque(range(num_blocks))
        self.num_cache_hit_tokens = 0

    @property
    def num_free_blocks(self) -> int:
        return len(self.free_block_ids)

    def _take(self, block: Block) -> Block:
        block.ref_count = 1
        self.free_block_ids.remove(block.block_id)
        return block

    def _take_fresh(self) -> Block:
        block = self._take(self.blocks[self.free_block_ids[0]])
        if block.hash != NO_HASH and self.hash_to_block.get(block.hash) == block.block_id:
            del self.hash_to_block[block.hash]
        block.hash, block.token_ids = NO_HASH, []
        return block

    def _register(self, block: Block, token_ids: list[int], h: int) -> None:
        block.hash, block.token_ids = h, list(token_ids)
        self.hash_to_block[h] = block.block_id

    def can_allocate(self, seq: Sequence) -> bool:
        """Enough free blocks for the whole sequence, counting no cache hits (conservative)."""
        return self.num_free_blocks >= seq.num_blocks

    def allocate(self, seq: Sequence) -> None:
        """Give ``seq`` a block table, reusing cached blocks for its longest cached prefix."""
        assert not seq.block_table
        h, cache_miss = NO_HASH, False
        for i in range(seq.num_blocks):
            tokens = seq.block(i)
            full = len(tokens) == self.block_size
            h = block_hash(tokens, h) if full else NO_HASH
            block_id = self.hash_to_block.get(h, -1) if full else -1
            cache_miss = cache_miss or block_id == -1 or self.blocks[block_id].token_ids != tokens
            if cache_miss:
                block = self._take_fresh()
                if full:
                    self._register(block, tokens, h)
            else:
                seq.num_cached_tokens += self.block_size
                block = self.blocks[block_id]
                if block.ref_count:
                    block.ref_count += 1
                else:
                    self._take(block)
            seq.block_table.append(block.block_id)
        if seq.num_cached_tokens == len(seq):
            # Fully cached prompt: recompute the last token to get its logits (it rewrites the same KV).
            seq.num_cached_tokens -= 1
        self.num_cache_hit_tokens += seq.num_cached_tokens

    def deallocate(self, seq: Sequence) -> None:
        """Release ``seq``'s blocks; freed blocks keep their hash for later prefix hits."""
        for block_id in reversed(seq.block_table):
            block = self.blocks[block_id]
            block.ref_count -= 1
            if block.ref_count == 0:
                self.free_block_ids.append(block_id)
        seq.num_cached_tokens = 0
        seq.block_table = []

    def can_append(self, seq: Sequence) -> bool:
        """Room for the token ``seq`` is about to compute (a new block when it starts one)."""
        return self.num_free_blocks >= (len(seq) % self.block_size == 1)

    def may_append(self, seq: Sequence) -> None:
        """Before a decode step: give ``seq`` a new block if its last token starts one, or register its full last
        block (a placeholder's: later, :meth:`register_full_block`)."""
        if len(seq) % self.block_size == 1:
            seq.block_table.append(self._take_fresh().block_id)
        elif len(seq) % self.block_size == 0 and seq.token_ids[-1] >= 0:
            self.register_full_block(seq, seq.num_blocks - 1)

    def register_full_block(self, seq: Sequence, i: int) -> None:
        """Register the hash of ``seq``'s full block ``i`` (tokens known, K/V written by a launched step)."""
        prev = self.blocks[seq.block_table[i - 1]].hash if i > 0 else NO_HASH
        tokens = seq.block(i)
        self._register(self.blocks[seq.block_table[i]], tokens, block_hash(tokens, prev))
