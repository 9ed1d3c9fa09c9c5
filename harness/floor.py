"""The memory-bandwidth floor of a decode-heavy workload (REFERENCE.md, "Floors on one H200").

Each decode step reads every weight once and the K/V of every running sequence's context. With all
requests running together (the bench fits: 256 <= max_num_seqs and the KV cache holds them), the steps
number max(output lengths) and request i at its j-th generated token reads (prompt_i + j) tokens of K/V.
Floor time = bytes / (tp * bandwidth): no schedule can beat it, whatever the kernels.
"""

from __future__ import annotations

H200_COPY_BANDWIDTH = 4.3e12  # bytes/s, device-to-device copy measured on the H200 machine (REFERENCE.md)


def decode_floor(prompt_lens: list[int], output_lens: list[int], hf: dict, bytes_per_elt: int, tp: int,
                 bandwidth: float = H200_COPY_BANDWIDTH) -> dict:
    """Returns bytes of weights and KV that decode must read, and the floor in s and output tok/s."""
    H, L, D = hf["hidden_size"], hf["num_hidden_layers"], hf["head_dim"]
    q, kv, inter, V = hf["num_attention_heads"] * D, hf["num_key_value_heads"] * D, hf["intermediate_size"], hf["vocab_size"]
    per_layer = H * (q + 2 * kv) + q * H + 3 * H * inter + 2 * H + 2 * D
    weights = (L * per_layer + V * H + H) * bytes_per_elt  # layers + LM head (tied or not, read once) + norm
    kv_per_token = 2 * L * kv * bytes_per_elt
    kv_tokens = sum(p * (o - 1) + (o - 1) * o // 2 for p, o in zip(prompt_lens, output_lens))
    total = weights * max(output_lens) + kv_per_token * kv_tokens
    seconds = total / (tp * bandwidth)
    return {"weight_bytes": weights * max(output_lens), "kv_bytes": kv_per_token * kv_tokens, "floor_s": seconds,
            "floor_tok_s": sum(output_lens) / seconds}
