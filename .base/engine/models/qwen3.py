"""Qwen3 (dense) for causal LM: GQA attention with per-head q/k RMSNorm and RoPE, SwiGLU MLP, tied or
untied embeddings. Parameter names follow the Hugging Face checkpoint, except the fused projections,
which ``packed_modules_mapping`` maps back to their checkpoint parts."""

from __future__ import annotations

import torch
from torch import nn

from ..layers.attention import Attention
from ..layers.embed_head import ParallelLMHead, VocabParallelEmbedding
from ..layers.fusion import ElementwiseOps, RMSNorm, RotaryEmbedding
from ..layers.gemm import norm_linear
from ..layers.linear import MergedColumnParallelLinear, QKVParallelLinear, RowParallelLinear
from ..layers.parallel import tp_size
from ..layers.sampler import sample
from ..step_inputs import StepInputs


class Qwen3Attention(nn.Module):
    """Self-attention on this rank's heads: projected ``qkv [N, (Hq + 2 Hkv) / tp * D]`` (QKV column-parallel,
    called by the layer fused with its norm) -> q/k RMSNorm and RoPE (inside the decode kernel on CUDA),
    paged attention, row-parallel o_proj -> ``[N, hidden]``."""
    def __init__(self, hf: dict, ops: ElementwiseOps):
        super().__init__()
        self.ops = ops
        D, Hq, Hkv, eps = hf["head_dim"], hf["num_attention_heads"], hf["num_key_value_heads"], hf["rms_norm_eps"]
        bias = hf.get("attention_bias", False)
        self.qkv_proj = QKVParallelLinear(hf["hidden_size"], D, Hq, Hkv, bias)
        self.o_proj = RowParallelLinear(Hq * D, hf["hidden_size"], bias)
        self.q_norm, self.k_norm = RMSNorm(D, eps, ops), RMSNorm(D, eps, ops)
        self.attn = Attention(Hq // tp_size(), Hkv // tp_size(), D, D ** -0.5)

    def forward(self, qkv, cos_sin, inputs: StepInputs):
        heads = [self.attn.num_heads, self.attn.num_kv_heads, self.attn.num_kv_heads]
        q, k, v = qkv.view(-1, sum(heads), self.attn.head_dim).split(heads, dim=1)
        qk_norm = (self.q_norm.weight, self.k_norm.weight, self.q_norm.eps, *cos_sin)
        if inputs.attn.context_lens is not None:  # CUDA decode: the kernel normalises and rotates q and k
            out = self.attn(q, k, v, inputs.attn, qk_norm)
        else:
            out = self.attn(*self.ops.qk_norm_rotary(q, k, *qk_norm), v, inputs.attn)
        return self.o_proj(out.flatten(1))


class Qwen3DecoderLayer(nn.Module):
    """One transformer block: RMSNorm, attention, RMSNorm, MLP, with the residual adds inside the norms and
    each norm fused with the projection after it (``gemm.norm_linear``: one kernel at batch 1 on CUDA)."""
    def __init__(self, hf: dict, ops: ElementwiseOps):
        super().__init__()
        self.self_attn = Qwen3Attention(hf, ops)
        inter = hf["intermediate_size"]  # the SwiGLU MLP's parameters (run by forward): gate/up, down
        self.mlp = nn.ModuleDict({"gate_up_proj": MergedColumnParallelLinear(hf["hidden_size"], [inter, inter]),
                                  "down_proj": RowParallelLinear(inter, hf["hidden_size"])})
        self.ops = ops
        self.input_layernorm = RMSNorm(hf["hidden_size"], hf["rms_norm_eps"], ops)
        self.post_attention_layernorm = RMSNorm(hf["hidden_size"], hf["rms_norm_eps"], ops)

    def forward(self, h, residual, cos_sin, inputs):
        """h: the previous layer's output ``[N, hidden]``, residual: the stream before it (None at the first
        layer) -> this layer's (output, residual)."""
        attn, mlp = self.self_attn, self.mlp
        qkv, residual = norm_linear(h, residual, self.input_layernorm, attn.qkv_proj.weight, attn.qkv_proj.bias)
        h = attn(qkv, cos_sin, inputs)
        act, residual = norm_linear(h, residual, self.post_attention_layernorm, mlp.gate_up_proj.weight,
                                    swiglu=self.ops.silu_and_mul)
        return mlp.down_proj(act), residual


class Qwen3Model(nn.Module):
    """Embedding (vocabulary-parallel), the decoder layers and the final norm: StepInputs -> ``[N, hidden]``."""
    def __init__(self, hf: dict, ops: ElementwiseOps):
        super().__init__()
        self.embed_tokens = VocabParallelEmbedding(hf["vocab_size"], hf["hidden_size"])
        self.layers = nn.ModuleList(Qwen3DecoderLayer(hf, ops) for _ in range(hf["num_hidden_layers"]))
        self.norm = RMSNorm(hf["hidden_size"], hf["rms_norm_eps"], ops)
        self.rotary = RotaryEmbedding(hf["head_dim"], hf["max_position_embeddings"], hf["rope_theta"])

    def forward(self, inputs: StepInputs) -> torch.Tensor:
        cos_sin = self.rotary(inputs.positions)  # first: a torch kernel between two Triton ones breaks PDL's chain
        h, residual = self.embed_tokens(inputs.input_ids, inputs.previous_tokens), None
        for layer in self.layers:
            h, residual = layer(h, residual, cos_sin, inputs)
        return self.norm(h, residual)[0]


class Qwen3ForCausalLM(nn.Module):
    """forward: StepInputs -> hidden ``[N, hidden]``; compute_logits: hidden ``[B, hidden]`` -> this rank's
    logits shard ``[B, vocab / tp]`` (columns ``lm_head.vocab_start`` onwards) in the model's dtype."""

    packed_modules_mapping = {"q_proj": ("qkv_proj", "q"), "k_proj": ("qkv_proj", "k"), "v_proj": ("qkv_proj", "v"),
                              "gate_proj": ("gate_up_proj", 0), "up_proj": ("gate_up_proj", 1)}

    def __init__(self, hf: dict):
        super().__init__()
        self.ops = ElementwiseOps()  # this model's elementwise functions (layers/fusion.py)
        self.model = Qwen3Model(hf, self.ops)
        self.lm_head = ParallelLMHead(hf["vocab_size"], hf["hidden_size"])
        if hf.get("tie_word_embeddings", False):
            self.lm_head.weight = self.model.embed_tokens.weight

    def forward(self, inputs: StepInputs) -> torch.Tensor:
        return self.model(inputs)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(hidden)

    def sample(self, hidden: torch.Tensor, temperatures: torch.Tensor, seed: torch.Tensor,
               out: torch.Tensor | None = None) -> torch.Tensor:
        """hidden ``[B, hidden]`` of each sequence's last token -> sampled token ids ``[B]`` int64 (into ``out``
        when given), the same on every rank (``layers.sampler``; temperatures ``[B]`` float32, seed ``[1]`` int64)."""
        head = self.lm_head
        return sample(self.compute_logits(hidden), head.vocab_start, head.vocab_size, temperatures, seed, out)

    def attention_layers(self) -> list[Attention]:
        return [layer.self_attn.attn for layer in self.model.layers]
