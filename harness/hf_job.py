"""``engine=hf``: the workload through transformers' ``generate`` on one device, one row per repeat, in
left-padded batches of ``hf_batch_size`` run to their largest ``max_tokens``; only each request's own tokens
count as output. TTFT, TPOT and ITL stay empty; E2EL is the batch's end."""

from __future__ import annotations

import sys
import time

import torch
from omegaconf import DictConfig
from tqdm.auto import tqdm

from engine import ConfigError
from engine.config import resolve_dtype, torch_dtype

from .job_setup import base_row, failed, model_label, prepare, resolve_device
from .metrics import energy_per_token, summarize, throughput
from .nvml_sampler import NvmlSampler
from .report import print_summary, show_progress
from .workloads import Workload


def run_hf(cfg: DictConfig, path: str, work: Workload, device: str, dtype: str) -> tuple[dict, int]:
    """(the metric columns of one timed pass after an untimed warm-up, the tokens generated, padding included)."""
    from transformers import Qwen3ForCausalLM

    model = Qwen3ForCausalLM.from_pretrained(path, dtype=torch_dtype(dtype)).to(device).eval()
    torch.manual_seed(cfg.seed)
    batch_size = cfg.hf_batch_size

    def generate(prompts: list[list[int]], max_new: int, temperature: float) -> None:
        width = max(len(p) for p in prompts)
        ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts], device=device)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=device)
        kwargs = dict(do_sample=True, temperature=temperature) if temperature > 0 else dict(do_sample=False)
        with torch.inference_mode():
            model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new, min_new_tokens=max_new,
                           pad_token_id=0, **kwargs)
        if device == "cuda":
            torch.cuda.synchronize()

    generate([work.prompts[0][:32]], 8, 0.0)  # warm-up
    start = time.perf_counter()
    e2el, generated = [], 0
    for i in tqdm(range(0, len(work.prompts), batch_size), desc="hf generate", disable=not show_progress(cfg.progress)):
        prompts, params = work.prompts[i:i + batch_size], work.params[i:i + batch_size]
        max_new = max(p.max_tokens for p in params)
        generate(prompts, max_new, params[0].temperature)
        e2el += [(time.perf_counter() - start) * 1e3] * len(prompts)
        generated += max_new * len(prompts)
    duration = time.perf_counter() - start
    row = throughput(len(work.prompts), sum(work.prompt_lens), sum(p.max_tokens for p in work.params), duration)
    return {**row, **summarize(e2el, "e2el_ms")}, generated


def run_hf_job(cfg: DictConfig) -> int:
    """Exit code 0, 1 (a failed row), 2 (bad input: no row), 130."""
    device = resolve_device(cfg.device)
    dtype = resolve_dtype(cfg.dtype, device)
    row0 = {**base_row(cfg, device), "control": None, "dtype": dtype}
    try:
        results, path, work = prepare(cfg, device)
        row0["model"], row0["model_hash"] = model_label(cfg, path)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    repeat = 0
    try:
        for repeat in range(cfg.repeat):
            sampler = NvmlSampler([0] if device == "cuda" else [], cfg.nvml_interval_s).start()
            try:
                metrics_row, generated = run_hf(cfg, path, work, device, dtype)
            finally:
                sampler.stop()
            nvml = sampler.summary()
            row = {**row0, "repeat": repeat, "status": "ok", **metrics_row, **nvml, "gpu_name": sampler.gpu_name,
                   **energy_per_token(nvml["gpu_energy_j"], metrics_row["output_tokens"])}
            print(f"  transformers generated {generated} tokens for {row['output_tokens']} requested "
                  f"({generated - row['output_tokens']} padding waste, not counted)")
            print_summary(row, results.add(row))
        return 1 if results.problem else 0
    except BaseException as e:
        return failed(results, row0, repeat, e)
