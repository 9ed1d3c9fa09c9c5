"""Loading a Hugging Face safetensors checkpoint into the tensor-parallel model, each rank reading only its shard."""

from __future__ import annotations

import glob
import os

from safetensors import safe_open
from torch import nn

from .config import ConfigError
from .layers.linear import check_shape


def expected_tensors(hf: dict) -> dict[str, tuple[int, ...]]:
    """Full (unsharded) shape of every tensor a Qwen3 checkpoint must hold, by checkpoint name."""
    H, D, inter = hf["hidden_size"], hf["head_dim"], hf["intermediate_size"]
    q, kv = hf["num_attention_heads"] * D, hf["num_key_value_heads"] * D
    shapes = {"model.embed_tokens.weight": (hf["vocab_size"], H), "model.norm.weight": (H,)}
    if not hf.get("tie_word_embeddings", False):
        shapes["lm_head.weight"] = (hf["vocab_size"], H)
    layer = {"input_layernorm.weight": (H,), "post_attention_layernorm.weight": (H,),
             "self_attn.q_proj.weight": (q, H), "self_attn.k_proj.weight": (kv, H),
             "self_attn.v_proj.weight": (kv, H), "self_attn.o_proj.weight": (H, q),
             "self_attn.q_norm.weight": (D,), "self_attn.k_norm.weight": (D,),
             "mlp.gate_proj.weight": (inter, H), "mlp.up_proj.weight": (inter, H), "mlp.down_proj.weight": (H, inter)}
    if hf.get("attention_bias", False):
        layer.update({"self_attn.q_proj.bias": (q,), "self_attn.k_proj.bias": (kv,), "self_attn.v_proj.bias": (kv,),
                      "self_attn.o_proj.bias": (H,)})
    for i in range(hf["num_hidden_layers"]):
        shapes.update({f"model.layers.{i}.{name}": shape for name, shape in layer.items()})
    return shapes


def checkpoint_files(path: str) -> list[str]:
    """The ``*.safetensors`` files of checkpoint directory ``path``, sorted."""
    return sorted(glob.glob(os.path.join(path, "*.safetensors")))


def check_checkpoint(path: str, hf: dict) -> None:
    """From the safetensors headers alone: every expected tensor is there, with its shape. Raises ConfigError (one
    line, naming it): a file unreadable, a tensor missing, in two files, of the wrong shape, or not in config.json."""
    found: dict[str, tuple[int, ...]] = {}
    where: dict[str, str] = {}
    for file in checkpoint_files(path):
        try:
            with safe_open(file, framework="pt") as f:
                shapes = {name: tuple(f.get_slice(name).get_shape()) for name in f.keys()}  # noqa: SIM118
        except Exception as e:  # safetensors raises its own error types for damaged headers
            raise ConfigError(f"cannot read {file}: {e}") from None
        if (name := next((n for n in shapes if n in where), None)) is not None:
            raise ConfigError(f"checkpoint {path}: tensor {name} is in two files, "
                              f"{os.path.basename(where[name])} and {os.path.basename(file)}")
        found.update(shapes)
        where.update(dict.fromkeys(shapes, file))
    expected = expected_tensors(hf)
    for name, shape in expected.items():
        if name not in found:
            raise ConfigError(f"checkpoint {path} lacks tensor {name}")
        if found[name] != shape:
            raise ConfigError(f"checkpoint {path}: tensor {name} has shape {list(found[name])}, expected {list(shape)}")
    tied = hf.get("tie_word_embeddings")  # beside the weights: older exports' RoPE inv_freq, a tied lm_head
    if unused := sorted(n for n in found if n not in expected and not n.endswith("rotary_emb.inv_freq")
                        and not (n == "lm_head.weight" and tied)):
        raise ConfigError(f"checkpoint {path} holds {len(unused)} tensor(s) its config.json does not describe, "
                          f"e.g. {unused[0]} (num_hidden_layers={hf['num_hidden_layers']}: is it right?)")


def default_weight_loader(param: nn.Parameter, src) -> None:
    """Copy safetensors slice ``src`` into ``param`` whole. Raises ValueError when the shapes differ."""
    check_shape(src, param.shape)
    param.data.copy_(src[:])


def load_weights(model: nn.Module, path: str) -> None:
    """Copy this rank's shard of every checkpoint tensor into ``model``. Raises ValueError: a tensor has the
    wrong shape, or a model parameter is in no checkpoint file."""
    packed = getattr(model, "packed_modules_mapping", {})
    params = dict(model.named_parameters())
    loaded: set[str] = set()
    for file in checkpoint_files(path):
        with safe_open(file, framework="pt") as f:
            for name in f.keys():  # noqa: SIM118 (safe_open is not iterable)
                target, shard_id = name, None
                for part, (fused, sid) in packed.items():
                    if f".{part}." in name:
                        target, shard_id = name.replace(f".{part}.", f".{fused}."), sid
                        break
                if target not in params:
                    continue  # e.g. lm_head.weight saved beside tied embeddings
                param = params[target]
                loader = getattr(param, "weight_loader", default_weight_loader)
                try:
                    loader(param, f.get_slice(name), *(() if shard_id is None else (shard_id,)))
                except ValueError as e:
                    raise ValueError(f"{file}: tensor {name}: {e}") from None
                loaded.add(target)
    if missing := sorted(set(params) - loaded):
        raise ValueError(f"checkpoint {path} has no tensor for {', '.join(missing[:5])}")
