"""Rank 0's admission of requests as they arrive, continuous batching (prefill first, then batched decode,
preemption by recompute) and paged KV-cache bookkeeping: block allocation, reference counts, prefix caching (vLLM's,
simplified): a full block is identified by hash(previous block's hash, its token ids), its token ids compared too.
A freed block keeps its hash and contents until handed out again, for a later request with that prefix."""

from __future__ import annotations

import bisect
from collections import deque

from .sequence import Sequence, SequenceStatus

NO_HASH = -1


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

    def allocate(self, seq: Sequence) -> None:
        """Give ``seq`` a block table, reusing cached blocks for its longest cached prefix."""
        assert not seq.block_table
        h, cache_miss = NO_HASH, False
        for i in range(seq.num_blocks):
            tokens = seq.block(i)
            full = len(tokens) == self.block_size
            h = hash((h, tuple(tokens))) if full else NO_HASH
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
        self._register(self.blocks[seq.block_table[i]], tokens, hash((prev, tuple(tokens))))


class Scheduler:
    """Each step's batch: a prefill of the waiting sequences that fit (tokens, KV blocks, ``max_num_seqs``), else a
    decode of every running one, preempting the latest started when out of blocks. A step: :meth:`schedule`,
    launch, :meth:`on_launch` (placeholders), :meth:`postprocess` (tokens); async scheduling schedules the next
    between the last two. A sequence at its length limit waits in ``finishing`` until its step finishes."""

    def __init__(self, max_num_seqs: int, max_num_batched_tokens: int, max_model_len: int,
                 block_manager: BlockManager, eos_token_ids: frozenset[int] = frozenset()):
        self.max_num_seqs, self.max_num_batched_tokens = max_num_seqs, max_num_batched_tokens
        self.max_model_len, self.block_manager, self.eos_token_ids = max_model_len, block_manager, eos_token_ids
        self.waiting: deque[Sequence] = deque()
        self.running: deque[Sequence] = deque()
        self.finishing: set[Sequence] = set()
        self.num_preemptions = 0

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def is_finished(self) -> bool:
        return not self.waiting and not self.running and not self.finishing

    def schedule(self) -> tuple[list[Sequence], bool]:
        """Returns ``(sequences, is_prefill)``; none when nothing can run before the step in flight finishes (or
        right after preempting the only running sequence: the next call prefills it)."""
        scheduled, num_tokens, bm = [], 0, self.block_manager
        while self.waiting and len(self.running) + len(self.finishing) < self.max_num_seqs:
            seq = self.waiting[0]
            # blocks for the whole sequence, counting no cache hits (conservative)
            if num_tokens + len(seq) > self.max_num_batched_tokens or bm.num_free_blocks < seq.num_blocks:
                break
            bm.allocate(seq)
            num_tokens += len(seq) - seq.num_cached_tokens
            seq.status = SequenceStatus.RUNNING
            self.running.append(self.waiting.popleft())
            scheduled.append(seq)
        if scheduled:
            return scheduled, True
        while self.running:
            seq = self.running.popleft()
            while not bm.can_append(seq):
                if self.running:
                    self._preempt(self.running.pop())
                else:
                    self._preempt(seq)
                    break
            else:
                bm.may_append(seq)
                scheduled.append(seq)
        self.running.extendleft(reversed(scheduled))
        return scheduled, False

    def _preempt(self, seq: Sequence) -> None:
        seq.status = SequenceStatus.WAITING
        seq.num_preemptions += 1
        self.num_preemptions += 1
        self.block_manager.deallocate(seq)
        self.waiting.appendleft(seq)

    def on_launch(self, seqs: list[Sequence]) -> list[int]:
        """The step over ``seqs`` was launched: append each row's placeholder; returns their positions."""
        positions = []
        for row, seq in enumerate(seqs):
            positions.append(seq.append_placeholder(row))
            if seq.num_completion_tokens >= seq.max_tokens or len(seq) >= self.max_model_len:
                self.running.remove(seq)
                self.finishing.add(seq)
        return positions

    def postprocess(self, seqs: list[Sequence], positions: list[int], token_ids: list[int],
                    now_s: float) -> list[Sequence]:
        """A launched step finished: write its sampled ``token_ids`` over the placeholders at ``positions``; return
        the sequences finished (EOS unless ignore_eos, max_tokens, max_model_len). A finished one's row is dropped."""
        finished = []
        for seq, pos, token_id in zip(seqs, positions, token_ids, strict=True):
            if seq.status == SequenceStatus.FINISHED:
                continue
            seq.token_ids[pos] = token_id
            seq.token_times_s.append(now_s)
            last = pos == len(seq) - 1
            stop = not seq.ignore_eos and token_id in self.eos_token_ids
            if stop or (last and seq in self.finishing):
                del seq.token_ids[pos + 1:]  # a placeholder of the step after, whose row is dropped
                seq.finish_reason = "stop" if stop else "length"
                self._finish(seq)
                finished.append(seq)
            elif not last and (pos + 1) % self.block_manager.block_size == 0 and seq.block_table:
                # The step after (launched) writes its K/V, completing a block may_append could not hash before.
                self.block_manager.register_full_block(seq, pos // self.block_manager.block_size)
        return finished

    def _finish(self, seq: Sequence) -> None:
        if seq in self.finishing:
            self.finishing.remove(seq)
        elif seq.status == SequenceStatus.WAITING:  # preempted while its step was in flight
            self.waiting.remove(seq)
        else:
            self.running.remove(seq)
        seq.status = SequenceStatus.FINISHED
        self.block_manager.deallocate(seq)


class Arrivals:
    """Requests not yet admitted, in arrival order (ties: the order added), each admitted at the first step
    boundary after its arrival. ``log[n]``: (requests admitted by the launch of step ``n``, whether the last of
    them while idle). ``plan``: a log to follow (None: by arrival): each request is admitted before the recorded
    launch, in the recorded state (idle: it waits for idle, then its arrival; busy: it holds no batch back)."""

    def __init__(self, plan: list[tuple[int, bool]] | None = None):
        self._pending: list[tuple[float, int, Sequence]] = []
        self.admitted, self._admitted_idle = 0, False
        self.log: list[tuple[int, bool]] = []
        self.plan = plan

    def __len__(self) -> int:
        return len(self._pending)

    def add(self, seq: Sequence) -> None:
        bisect.insort(self._pending, (seq.arrival_s, seq.seq_id, seq), key=lambda item: item[:2])

    def _planned(self, launches: int, idle: bool) -> int | None:
        """How many pending requests the plan admits before launch ``launches`` (0 while busy where the
        recording admitted them idle; None: no plan, or past its end, where the ideal plane reports it)."""
        if self.plan is None or launches >= len(self.plan):
            return None
        count, when_idle = self.plan[launches]
        return min(max(count - self.admitted, 0), len(self._pending)) if idle or not when_idle else 0

    def wait_until(self, now_s: float, launches: int, idle: bool) -> float | None:
        """The perf_counter() time to sleep until before admitting (None: now). Only while ``idle`` (nothing
        running or in flight): the next arrival, or under a plan the last one it admits before this launch."""
        planned = self._planned(launches, idle)
        last = 1 if planned is None else planned  # no plan: wait for the next arrival
        t = self._pending[last - 1][0] if last and idle and self._pending else now_s
        return t if t > now_s else None

    def due(self, now_s: float, launches: int, idle: bool) -> list[Sequence]:
        """Take the requests to admit before launch ``launches``, in arrival order."""
        n = self._planned(launches, idle)
        if n is None:
            n = bisect.bisect_right(self._pending, now_s, key=lambda item: item[0])
        taken, self._pending = self._pending[:n], self._pending[n:]
        self.admitted += n
        if n:
            self._admitted_idle = idle
        for _, _, seq in taken:
            seq.arrival_s = min(seq.arrival_s, now_s)  # (only under a plan can it be later)
        return [seq for _, _, seq in taken]

    def on_launch(self) -> None:
        self.log.append((self.admitted, self._admitted_idle))
        self._admitted_idle = False
