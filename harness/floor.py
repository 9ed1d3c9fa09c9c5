"""The physical floor of a decode-heavy workload (the method of results/h200/NOTES.md, "The two floors"). Each
decode step reads every weight once (each GPU its 1/tp share) and the K/V of every running sequence's context,
and with tp > 1 runs 2 all-reduces per layer, one after the embedding and one in the sampler. With all requests
running together, the steps number max(output lengths) and request i at its j-th generated token reads
(prompt_i + j) tokens of K/V. Floor time = bytes / (tp * bandwidth) + steps * all-reduces * ALL_REDUCE_FLOOR_S."""

from __future__ import annotations

H200_COPY_BANDWIDTH = 4.3e12  # bytes/s: a device-to-device copy on the H200 machines (the device tool's KINDS.md)
ALL_REDUCE_FLOOR_S = 3e-6  # s per all-reduce: below the fastest measured on the H200 pair (~5 us, symmetric memory)


def decode_floor(prompt_lens: list[int], output_lens: list[int], hf: dict, bytes_per_elt: int, tp: int) -> dict:
    """Per GPU, the bytes decode must read (``weight_bytes``, ``kv_bytes``), ``all_reduces_per_step`` and the floor:
    ``floor_s`` (s), ``floor_tok_s`` (output tok/s), ``step_floor_ms`` (the mean decode step, ms: a TPOT floor)."""
    H, L, D = hf["hidden_size"], hf["num_hidden_layers"], hf["head_dim"]
    q, kv = hf["num_attention_heads"] * D, hf["num_key_value_heads"] * D
    inter, V = hf["intermediate_size"], hf["vocab_size"]
    per_layer = H * (q + 2 * kv) + q * H + 3 * H * inter + 2 * H + 2 * D
    weights = (L * per_layer + V * H + H) * bytes_per_elt  # layers + LM head (tied or not, read once) + norm
    kv_per_token = 2 * L * kv * bytes_per_elt
    kv_tokens = sum(p * (o - 1) + (o - 1) * o // 2 for p, o in zip(prompt_lens, output_lens))
    steps = max(output_lens)
    all_reduces = 2 * L + 2 if tp > 1 else 0
    total = weights * steps + kv_per_token * kv_tokens
    seconds = total / (tp * H200_COPY_BANDWIDTH) + steps * all_reduces * ALL_REDUCE_FLOOR_S
    return {"weight_bytes": weights * steps / tp, "kv_bytes": kv_per_token * kv_tokens / tp, "floor_s": seconds,
            "floor_tok_s": sum(output_lens) / seconds, "all_reduces_per_step": all_reduces,
            "step_floor_ms": seconds / steps * 1e3}
