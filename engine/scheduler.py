"""Continuous batching on rank 0: prefill first, then batched decode, preemption by recompute."""

from __future__ import annotations

from collections import deque

from .block_manager import BlockManager
from .sequence import Sequence, SequenceStatus


class Scheduler:
    """Chooses each step's batch.

    A step is either a prefill batch (waiting sequences, as many as fit in ``max_num_batched_tokens`` and
    the free KV blocks while at most ``max_num_seqs`` run) or, when nothing can be prefilled, a decode batch
    of every running sequence. When a decode step runs out of blocks, the most recently started sequence
    is preempted: its blocks are freed and it goes back to the front of the queue to be recomputed.
    """

    def __init__(self, max_num_seqs: int, max_num_batched_tokens: int, max_model_len: int,
                 block_manager: BlockManager, eos_token_id: int | None):
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_model_len = max_model_len
        self.block_manager = block_manager
        self.eos_token_id = eos_token_id
        self.waiting: deque[Sequence] = deque()
        self.running: deque[Sequence] = deque()
        self.num_preemptions = 0

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def is_finished(self) -> bool:
        return not self.waiting and not self.running

    def schedule(self) -> tuple[list[Sequence], bool]:
        """Returns ``(sequences, is_prefill)``.

        Raises:
            RuntimeError: a waiting sequence cannot fit in the KV cache even with nothing else running.
        """
        scheduled, num_tokens = [], 0
        while self.waiting and len(self.running) < self.max_num_seqs:
            seq = self.waiting[0]
            if num_tokens + len(seq) > self.max_num_batched_tokens or not self.block_manager.can_allocate(seq):
                break
            self.block_manager.allocate(seq)
            num_tokens += len(seq) - seq.num_cached_tokens
            seq.status, seq.prefill = SequenceStatus.RUNNING, True
            self.waiting.popleft()
            self.running.append(seq)
            scheduled.append(seq)
        if scheduled:
            return scheduled, True
        if not self.running:
            seq = self.waiting[0]
            raise RuntimeError(f"a sequence of {len(seq)} tokens needs {seq.num_blocks} KV blocks; the cache has "
                               f"{len(self.block_manager.blocks)} (raise num_kvcache_blocks or lower max_model_len)")

        while self.running:
            seq = self.running.popleft()
            while not self.block_manager.can_append(seq):
                if self.running:
                    self._preempt(self.running.pop())
                else:
                    self._preempt(seq)
                    break
            else:
                self.block_manager.may_append(seq)
                seq.prefill = False
                scheduled.append(seq)
        if not scheduled:  # the only running sequence was preempted: prefill it again next step
            return self.schedule()
        self.running.extendleft(reversed(scheduled))
        return scheduled, False

    def _preempt(self, seq: Sequence) -> None:
        seq.status = SequenceStatus.WAITING
        seq.num_preemptions += 1
        self.num_preemptions += 1
        self.block_manager.deallocate(seq)
        self.waiting.appendleft(seq)

    def postprocess(self, seqs: list[Sequence], token_ids: list[int], now_s: float) -> list[Sequence]:
        """Append each sampled token; finish sequences at EOS (unless ignore_eos), at max_tokens or at
        max_model_len. Returns the sequences that finished this step."""
        finished = []
        for seq, token_id in zip(seqs, token_ids):
            seq.append_token(token_id)
            seq.token_times_s.append(now_s)
            if ((not seq.ignore_eos and token_id == self.eos_token_id)
                    or seq.num_completion_tokens >= seq.max_tokens or len(seq) >= self.max_model_len):
                seq.status = SequenceStatus.FINISHED
                self.block_manager.deallocate(seq)
                self.running.remove(seq)
                finished.append(seq)
        return finished
