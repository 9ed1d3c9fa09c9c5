"""``engine=hf``: the workload through transformers' ``generate``. Requests go in left-padded batches of
``hf_batch_size``; a batch runs to its largest ``max_tokens`` (ignore_eos), and only each request's own count
as output (the rest is waste). No per-token times: TTFT, TPOT and ITL stay empty, E2EL is the batch's end.
"""

from __future__ import annotations

import time

import numpy as np
import torch
from tqdm.auto import tqdm

from engine.config import torch_dtype

from .metrics import summarize
from .workloads import Workload


def run_hf(path: str, work: Workload, device: str, dtype: str, batch_size: int, seed: int,
           progress: bool) -> tuple[dict, int]:
    """(the metric columns of one timed pass after an untimed warm-up, the tokens generated, padding included)."""
    from transformers import Qwen3ForCausalLM

    model = Qwen3ForCausalLM.from_pretrained(path, dtype=torch_dtype(dtype)).to(device).eval()
    torch.manual_seed(seed)

    def generate(prompts: list[list[int]], max_new: int, temperature: float) -> None:
        width = max(len(p) for p in prompts)
        ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts], device=device)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=device)
        kwargs = dict(do_sample=True, temperature=temperature) if temperature > 0 else dict(do_sample=False)
        with torch.inference_mode():
            model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new, min_new_tokens=max_new,
                           pad_token_id=0, **kwargs)

    generate([work.prompts[0][:32]], 8, 0.0)  # warm-up
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    e2el, generated = [], 0
    batches = range(0, len(work.prompts), batch_size)
    for i in tqdm(batches, desc="hf generate", disable=not progress):
        prompts, params = work.prompts[i:i + batch_size], work.params[i:i + batch_size]
        max_new = max(p.max_tokens for p in params)
        generate(prompts, max_new, params[0].temperature)
        if device == "cuda":
            torch.cuda.synchronize()
        e2el += [(time.perf_counter() - start) * 1e3] * len(prompts)
        generated += max_new * len(prompts)
    duration = time.perf_counter() - start
    out_tokens = sum(p.max_tokens for p in work.params)
    row = {"num_requests": len(work.prompts), "input_tokens": sum(work.prompt_lens), "output_tokens": out_tokens,
           "duration_s": duration, "output_tok_s": out_tokens / duration,
           "total_tok_s": (out_tokens + sum(work.prompt_lens)) / duration, "req_s": len(work.prompts) / duration}
    row.update(summarize(np.asarray(e2el), "e2el_ms"))
    return row, generated
