"""``engine=hf``: the workload through transformers' ``generate`` on one device, one row per repeat."""

from __future__ import annotations

import sys

from omegaconf import DictConfig

from engine import ConfigError
from engine.config import resolve_dtype

from .job_setup import base_row, failed, model_label, prepare, resolve_device
from .metrics import energy_per_token
from .nvml_sampler import NvmlSampler
from .report import print_summary, show_progress
from .transformers_baseline import run_hf


def run_hf_job(cfg: DictConfig) -> int:
    """Exit code 0, 1 (a failed row), 2 (bad input: no row), 130."""
    device = resolve_device(cfg.device)
    gpu = [0] if device == "cuda" else []
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
            sampler = NvmlSampler(gpu, cfg.nvml_interval_s).start()
            try:
                metrics_row, generated = run_hf(path, work, device, dtype, cfg.hf_batch_size, cfg.seed,
                                                    show_progress(cfg.progress))
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
