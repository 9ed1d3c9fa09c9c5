"""The per-run printout reads as sentences: no None where a value is known, the GPU line says why it is empty,
a serve run says its load, and no line of an ordinary run is wider than 120 characters."""

from __future__ import annotations

from harness.report import print_summary

OK = {"status": "ok", "engine": "tp", "control": "shm", "tp": 2, "model": "qwen3-tiny", "device": "cpu",
      "workload": "bench", "repeat": 0, "all_reduce": "gloo", "output_tok_s": 115.7, "total_tok_s": 294.1,
      "req_s": 3.09, "output_tokens": 599, "duration_s": 5.18, "ttft_ms_p50": 340.5, "ttft_ms_p99": 340.5,
      "tpot_ms_p50": 76.79, "itl_ms_p99": 165.2, "e2el_ms_p50": 3100.5, "prefill_steps": 1, "decode_steps": 63,
      "decode_step_ms_p50": 77.61, "ctrl_calls": 64, "ctrl_bytes_mean": 303.0, "ctrl_send_us_p50": 57.7,
      "ctrl_oneway_us_p50": 828.1, "ctrl_oneway_us_p99": 6724.1, "ctrl_oneway_over_step_pct": 1.91,
      "ctrl_launch_lag_us_mean": -117.3, "ctrl_launch_lag_us_p50": -167.9, "ctrl_launch_lag_us_p99": 7780.7,
      "ctrl_launch_late_us_mean": 918.3, "nvml": "no GPU in this run"}


def printed(capsys, row) -> list[str]:
    print_summary(row, "/tmp/x/runs.csv")
    return capsys.readouterr().out.strip().splitlines()


def test_an_engine_run_reads_as_sentences_within_120_columns(capsys):
    lines = printed(capsys, OK)
    assert lines[0] == "[ok] shm, tp=2, qwen3-tiny on cpu, workload=bench, repeat 0 (all_reduce=gloo)"
    # the new-user trial (session 31): "workload=serve, llm.timeout_s=10 workload.request_rate=2, repeat 0"
    overrides = printed(capsys, {**OK, "overrides": "llm.timeout_s=10 workload.request_rate=2"})[0]
    assert "workload=bench, llm.timeout_s=10, workload.request_rate=2, repeat 0" in overrides
    assert max(len(line) for line in lines) <= 120 and "None" not in "\n".join(lines)
    assert "  GPU         not measured: no GPU in this run" in lines
    assert any("< 0: before" in line for line in lines)  # the sign convention is printed with the lag
    assert any(line.endswith("over the decode step: 1.91%") for line in lines)  # not p50 / p50


def test_latency_is_mean_median_and_p99_of_each_metric_as_vllm_prints_it(capsys):
    row = {**OK, "ttft_ms_mean": 341.0, "tpot_ms_mean": 76.9, "tpot_ms_p99": 80.01, "itl_ms_mean": 76.5,
           "itl_ms_p50": 70.1, "e2el_ms_mean": 3100.5}
    lines = printed(capsys, row)
    at = lines.index("  latency     ms          mean       p50       p99")
    assert [line.split() for line in lines[at + 1:at + 5]] == [
        ["TTFT", "341.00", "340.50", "340.50"], ["TPOT", "76.90", "76.79", "80.01"],
        ["ITL", "76.50", "70.10", "165.20"], ["E2EL", "3100.50", "3100.50", "-"]]  # a missing cell reads "-"


def test_at_tp_1_the_control_line_says_nothing_was_sent(capsys):
    row = {k: v for k, v in OK.items() if not k.startswith("ctrl_")}  # tp=1's control cells are empty
    lines = printed(capsys, {**row, "tp": 1, "control": "ideal", "request_rate": 4.0, "achieved_rate_req_s": 4.0})
    # it read "64 messages, 0 B on average; rank 0 spends 0.0 us sending one"
    assert "  control     nothing sent: tp=1 has no worker (64 steps ran on rank 0 alone)" in lines
    assert not any("replays its recording" in line for line in lines)  # at tp=1 ideal serves the trace as asked


def test_a_one_token_run_has_one_step_and_no_decode_step_time(capsys):
    # a new-user trial: "1 steps ran on rank 0 alone", "a decode step takes - ms (p50)"
    row = {k: v for k, v in OK.items() if not k.startswith("ctrl_")}
    lines = printed(capsys, {**row, "tp": 1, "decode_steps": 0, "decode_step_ms_p50": None})
    assert "  steps       1 prefill and 0 decode steps" in lines
    assert "  control     nothing sent: tp=1 has no worker (1 step ran on rank 0 alone)" in lines
    # session 34's trial: at tp=2 the control line ended "over the decode step: -%"
    lines = printed(capsys, {**OK, "decode_steps": 0, "decode_step_ms_p50": None, "ctrl_oneway_over_step_pct": None})
    assert any(line.endswith("p99 6724.1); no decode step to set it beside") for line in lines), lines
    assert not any("%" in line or "over the mean decode step" in line for line in lines)


def test_the_run_file_is_named_under_the_row(capsys):
    print_summary(OK, "/tmp/x/runs.csv", run_file="/tmp/x/runs/abc.json")  # engine=hf named none
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-2:] == ["  row appended to /tmp/x/runs.csv",
                          "  run file    /tmp/x/runs/abc.json (its configuration, columns, vLLM's names)"]


def test_a_failed_broadcast_row_names_no_model(capsys):
    row = {"status": "failed", "engine": "tp", "control": "pipe", "tp": 2, "model": None, "device": "cpu",
           "workload": "broadcast", "repeat": 0, "error": "interrupted (SIGINT)"}
    lines = printed(capsys, row)
    assert lines[0] == "[failed] pipe, tp=2, cpu, workload=broadcast, repeat 0" and "None" not in "\n".join(lines)
    assert "  error       interrupted (SIGINT)" in lines


def test_a_serve_run_says_its_load_and_ideal_why_no_one_way(capsys):
    row = {**OK, "control": "ideal", "ctrl_oneway_us_p50": None, "ctrl_launch_lag_us_mean": None,
           "request_rate": 8.0, "achieved_rate_req_s": 7.08, "goodput_req_s": None, "slo": None,
           "queue_ms_p50": 1.5, "queue_ms_p99": 46.1, "serve_loop_us_per_step": 28.8}
    text = "\n".join(printed(capsys, row))
    assert "8 req/s asked, 7.08 sent (start to last send), 3.09 completed (start to last token)" in text
    assert "goodput: no SLO set" in text and max(len(line) for line in text.splitlines()) <= 120
    assert "no one-way latency" in text and "launch " not in text
    assert "64 messages replayed, none sent" in text and "rank 0 checks one in" in text
    row.update(request_rate=0.025, achieved_rate_req_s=0.025, req_s=0.02481)  # the serve user's trial: "0.03 sent"
    assert "0.025 req/s asked, 0.025 sent (start to last send), 0.02481 completed" in "\n".join(printed(capsys, row))


def test_a_broadcast_row_says_why_it_timed_fewer_messages(capsys):
    from harness.report import print_broadcast

    row = {"control": "shm", "tp": 2, "payload": "raw-16777216", "payload_bytes": 16777216, "ctrl_calls": 64,
           "ctrl_oneway_us_p50": 900.0, "ctrl_oneway_us_p99": 1200.0, "ctrl_send_us_p50": 800.0,
           "ctrl_send_us_p99": 1000.0}
    print_broadcast(row, messages=2000)
    print_broadcast({**row, "ctrl_calls": 2000}, messages=2000)
    capped, full = capsys.readouterr().out.strip().splitlines()
    assert capped.endswith("(64 msgs, fewer: max_bytes_per_payload caps them)") and full.endswith("(2000 msgs)")


def test_the_floor_line_names_the_bandwidth_of_its_gpu_and_the_all_reduce_cost(capsys, monkeypatch):
    from types import SimpleNamespace

    import torch

    from harness import report
    monkeypatch.setattr(report, "ALL_REDUCE_FLOOR_S", 7e-6)
    hf = {"hidden_size": 64, "num_hidden_layers": 2, "head_dim": 16, "num_attention_heads": 4,
          "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 256}
    work = SimpleNamespace(prompt_lens=[8, 8], params=[SimpleNamespace(max_tokens=4)] * 2, request_rate=None)
    llm = SimpleNamespace(config=SimpleNamespace(hf_config=hf, torch_dtype=torch.bfloat16))
    for gpu, tb_s in (("NVIDIA H100 80GB HBM3", 3), ("NVIDIA H200", 4.3)):  # the new-user trial: H200's on an H100
        floor = report.decode_floor([8, 8], [4, 4], hf, 2, 2, tb_s * 1e12)
        row = {**OK, "output_tok_s": floor["floor_tok_s"] / 2, "gpu_name": gpu}
        print_summary(row, "/tmp/x/runs.csv", floor=report.floor_lines(row, work, llm))
        lines = capsys.readouterr().out.splitlines()
        at = next(i for i, line in enumerate(lines) if line.startswith("  floor"))
        assert lines[at].endswith(f"at {tb_s:g} TB/s + 6 all-reduces x 7 us per step:")
        assert "= 50% of it" in lines[at + 1]
        assert "0.0 GB of KV" in lines[at] and max(map(len, lines)) <= 120  # GB, not "0.000 TB"
        assert lines[at - 1].startswith("  GPU") and lines[at + 2].startswith("  row appended")  # in the run's block
    paced = report.floor_lines(row, SimpleNamespace(**{**vars(work), "request_rate": 2.5}), llm)
    assert "tok/s, paced by 2.5 req/s, TPOT p50" in paced[1] and "% of it" not in paced[1]  # no share of a floor
    assert report.floor_lines({"tp": 2, "gpu_name": "NVIDIA A100-SXM4-80GB"}, work, llm)[0].startswith(
        "  floor       none: no copy bandwidth measured for NVIDIA A100")
