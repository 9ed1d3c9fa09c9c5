"""What a decode step's message costs to build, pickle and unpickle: the per-sequence tuples the engine
used to send (``(num_tokens, block_table, [last_token])`` per sequence) against ``StepBatch`` bytes.
Medians over 2,000 runs, in us, for 256 sequences at 1,024 tokens of context (block 256, the
``decode-256`` payload of workload=broadcast) and for 8.

    python scripts/step_encoding_cost.py
"""

import pickle
import time

import numpy as np

from engine.sequence import SamplingParams, Sequence
from engine.step_batch import StepBatch


def median_us(fn, n=2000):
    times = []
    for _ in range(n):
        t = time.perf_counter_ns()
        fn()
        times.append(time.perf_counter_ns() - t)
    return np.median(times) / 1e3


def main():
    for num_seqs in (8, 256):
        seqs = []
        for i in range(num_seqs):
            s = Sequence(list(range(1024)), SamplingParams(), 256)
            s.block_table = list(range(4 * i, 4 * i + 4))
            seqs.append(s)
        views = lambda: [(len(s), s.block_table, s.token_ids[-1:]) for s in seqs]  # noqa: E731
        old = pickle.dumps((0, "run", (views(), False)), protocol=pickle.HIGHEST_PROTOCOL)
        new = pickle.dumps((0, "run", (StepBatch.from_sequences(seqs, False).to_bytes(),)),
                           protocol=pickle.HIGHEST_PROTOCOL)
        print(f"decode-{num_seqs}: tuples {len(old)} B: build {median_us(views):.1f} + pickle "
              f"{median_us(lambda: pickle.dumps((0, 'run', (views(), False)), protocol=5)) - median_us(views):.1f}"
              f" | unpickle {median_us(lambda: pickle.loads(old)):.1f}")
        print(f"decode-{num_seqs}: StepBatch {len(new)} B: build+encode "
              f"{median_us(lambda: StepBatch.from_sequences(seqs, False).to_bytes()):.1f} + pickle "
              f"{median_us(lambda: pickle.dumps((0, 'run', (new,)), protocol=5)):.1f}"
              f" | unpickle+decode {median_us(lambda: StepBatch.from_bytes(pickle.loads(new)[2][0])):.1f}")


if __name__ == "__main__":
    main()
