"""The results CSV's columns, in order, documented in docs/REFERENCE.md. Bump SCHEMA_VERSION when they change."""

SCHEMA_VERSION = 12  # what each version changed: `git log -p harness/schema.py`

# the schema that added each configuration column after schema 1 (``analyze.comparable_keys`` reads it)
ADDED_IN = {"payload": 2, "payload_bytes": 2, "overrides": 4, "all_reduce": 5, "launcher": 5, "nodes": 5,
            "run_id": 6, "tag": 6, "model_hash": 6, "cpu_threads": 6, "gemm": 8, "request_rate": 10,
            "burstiness": 10, "max_concurrency": 10, "slo": 10}

CONFIG = ["schema_version", "time_utc", "run_id", "tag", "status", "error", "engine", "control", "tp", "launcher",
          "nodes", "model", "model_hash", "device", "dtype", "cpu_threads", "all_reduce", "gemm", "workload",
          "overrides", "payload", "payload_bytes", "request_rate", "burstiness", "max_concurrency", "slo", "seed",
          "repeat"]
THROUGHPUT = ["num_requests", "input_tokens", "output_tokens", "duration_s", "output_tok_s", "total_tok_s", "req_s",
              "achieved_rate_req_s", "goodput_req_s"]
LATENCY = [f"{m}_{s}" for m in ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms", "queue_ms")
           for s in ("mean", "p50", "p90", "p99", "std")]
STEPS = ["prefill_steps", "decode_steps", "decode_step_ms_p50", "decode_step_ms_p99", "preemptions",
         "prefix_cache_hit_tokens", "kv_blocks", "kvcache_block_size", "serve_loop_us_per_step"]
CONTROL = ["ctrl_calls", "ctrl_bytes_mean", "ctrl_bytes_max", "ctrl_oneway_us_p50", "ctrl_oneway_us_p99",
           "ctrl_send_us_p50", "ctrl_send_us_p99", "ctrl_oneway_over_step_pct", "ctrl_launch_lag_us_mean",
           "ctrl_launch_lag_us_p50", "ctrl_launch_lag_us_p99", "ctrl_launch_late_us_mean", "clock_sync",
           "clock_uncertainty_us"]
GPU = ["gpu_util_pct_mean", "gpu_util_pct_max", "gpu_util_pct_by_gpu", "gpu_mem_used_mib_max", "gpu_power_w_mean",
       "gpu_energy_j", "j_per_output_token", "nvml"]
META = ["git_commit", "torch_version", "cuda_version", "nccl_version", "driver_version", "transformers_version",
        "triton_version", "gpu_name", "host", "python_version", "hydra_dir", "cpu_model", "cpu_cores", "load_avg_1m",
        "cpu_others_cores"]

RENAMED = {"ctrl_decode_share_pct": "ctrl_oneway_over_step_pct"}  # older name -> current, for reading old files

COLUMNS = CONFIG + THROUGHPUT + LATENCY + STEPS + CONTROL + GPU + META

# read as text, never as numbers: a run_id "122e20195055" is not inf, a cuda_version "12.10" not 12.1
TEXT = ["time_utc", "run_id", "tag", "status", "error", "engine", "control", "launcher", "model", "model_hash",
        "device", "dtype", "all_reduce", "gemm", "workload", "overrides", "payload", "slo", "clock_sync",
        "gpu_util_pct_by_gpu", "nvml"] + [c for c in META if c not in ("cpu_cores", "load_avg_1m", "cpu_others_cores")]


def normalize_overrides(text) -> str | None:
    """The ``overrides`` cell in one spelling per configuration: items sorted, without Hydra's ``+`` / ``++``,
    ``True``/``False`` and ``Inf``/``NaN`` (as Hydra reads them) lower-case, a key given twice once (the last value,
    as Hydra takes it); None for no overrides."""
    if not isinstance(text, str) or not text.strip():
        return None
    words = ("true", "false", "inf", "+inf", "-inf", "nan")
    items = {key: sep + (value.lower() if value.lower() in words else value)
             for key, sep, value in (item.lstrip("+").partition("=") for item in text.split())}
    return " ".join(sorted(key + value for key, value in items.items()))
