"""Per-run files beside the results CSV: ``runs/<run_id>.json`` (the job's configuration, every column, and
vLLM's ``--save-result`` names for them; docs/METRICS.md), ``requests/<run_id>.jsonl`` (``save_requests``),
``traces/<run_id>_rank<k>.json`` (``profile=torch``)."""

from __future__ import annotations

import json
import math
import os
import sys

# vLLM's result key -> this project's column (vllm/benchmarks/serve.py, calculate_metrics and its result dict)
VLLM_ALIASES = {"completed": "num_requests", "total_input_tokens": "input_tokens",
                "total_output_tokens": "output_tokens", "duration": "duration_s",
                "request_throughput": "req_s", "output_throughput": "output_tok_s",
                "total_token_throughput": "total_tok_s", "request_goodput": "goodput_req_s",
                "request_rate": "request_rate", "burstiness": "burstiness", "max_concurrency": "max_concurrency"}
for _m in ("ttft", "tpot", "itl", "e2el"):
    VLLM_ALIASES.update({f"{stat}_{_m}_ms": f"{_m}_ms_{col}" for stat, col in
                         (("mean", "mean"), ("median", "p50"), ("std", "std"), ("p90", "p90"), ("p99", "p99"))})


def _plain(v):
    """A JSON value: None for NaN, infinities as strings (json's Infinity is not JSON)."""
    if isinstance(v, float) and not math.isfinite(v):
        return None if math.isnan(v) else str(v)
    return v


def write_run_json(directory: str, row: dict, config: dict | None) -> str | None:
    """Write ``<directory>/runs/<run_id>.json`` (via a temporary name): ``config`` (resolved), ``row`` (every
    column), ``vllm`` (the aliases with a value). Returns its path, or None after one line on stderr when it
    cannot be written (the CSV row is the record)."""
    path = os.path.join(directory, "runs", f"{row['run_id']}.json")
    data = {"config": config, "row": {k: _plain(v) for k, v in row.items()},
            "vllm": {alias: _plain(row[col]) for alias, col in VLLM_ALIASES.items() if row.get(col) is not None}}
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path + ".tmp", "w") as f:
            json.dump(data, f, indent=1, default=str)
        os.replace(path + ".tmp", path)
        return path
    except OSError as e:
        print(f"error: cannot write {path}: {e.strerror or e}", file=sys.stderr)
        return None


def run_path(directory: str, folder: str, name: str) -> str:
    """``<directory>/<folder>/<name>`` (its folder created): ``requests/<run_id>.jsonl``, or ``traces/<run_id>``,
    the prefix of a run's traces."""
    os.makedirs(os.path.join(directory, folder), exist_ok=True)
    return os.path.join(directory, folder, name)
