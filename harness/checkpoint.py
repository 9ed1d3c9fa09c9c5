"""Preset checkpoints: a Qwen3 config materialised once with transformers (random weights, fixed seed),
saved as config.json + model.safetensors in a cache directory, then loaded like any real checkpoint."""

from __future__ import annotations

import glob
import hashlib
import json
import os
import shutil
import tempfile

from filelock import FileLock
from omegaconf import OmegaConf

from common import ConfigError, OneLineParser

from .conf_paths import CONF_DIR, user_path
from .model_checks import parameter_count


def cache_dir() -> str:
    """Where presets are kept: ``$TPCP_CACHE`` (unless empty) or ``~/.cache/tp-controlplane-bench/models``, as an
    absolute path (``user_path``: the reader and the writer of a preset must agree on it)."""
    return user_path(os.environ.get("TPCP_CACHE") or "~/.cache/tp-controlplane-bench/models")


def materialize(name: str, config: dict, seed: int = 0, root: str | None = None, check=None) -> str:
    """The directory of preset ``name`` (``Qwen3Config`` keyword arguments ``config``, weights drawn with ``seed``;
    bfloat16 on the GPU where there is one), built on first use under a file lock. ``check(config)``: its problem
    as one line, or None, asked only before drawing (a drawn preset passed it then; the directory is a key of the
    preset). Raises ConfigError: the check's problem; OSError: the cache cannot be written."""
    import torch

    on_gpu = config.get("dtype") == "bfloat16" and torch.cuda.is_available()
    material = [config, seed] + (["cuda"] if on_gpu else [])
    key = hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:12]
    root = root or cache_dir()
    path = os.path.join(root, f"{name}-{key}")
    built = os.path.join(path, "config.json")  # a whole checkpoint: it is moved in at once, below
    if os.path.isfile(built):  # read without the lock: a read-only cache has no .lock to take
        return path
    if check is not None and (problem := check(config)):
        raise ConfigError(problem)
    os.makedirs(root, exist_ok=True)
    with FileLock(path + ".lock", timeout=600):
        if os.path.isfile(built):
            return path
        from transformers import Qwen3Config, Qwen3ForCausalLM
        from transformers.utils import logging as hf_logging

        shape = Qwen3Config(**config)
        params = parameter_count(shape.to_dict())
        size = params * (2 if config.get("dtype") == "bfloat16" else 4)
        print(f"building preset {name} once ({params / 1e6:,.1f} M parameters, {size / 2**30:.2f} GiB; transformers, "
              f"random weights, seed {seed}) into {path}", flush=True)
        hf_logging.disable_progress_bar()
        torch.manual_seed(seed)
        if on_gpu:
            previous = torch.get_default_dtype()
            torch.set_default_dtype(torch.bfloat16)
            try:
                with torch.device("cuda"):
                    model = Qwen3ForCausalLM(shape)
            finally:
                torch.set_default_dtype(previous)
        else:
            model = Qwen3ForCausalLM(shape).to(torch.bfloat16 if config.get("dtype") == "bfloat16"
                                                                  else torch.float32)
        # what a builder killed mid-write left (this process holds the lock: no builder of it is alive)
        for stale in glob.glob(os.path.join(root, f".{name}-{key}-*")):
            shutil.rmtree(stale, ignore_errors=True)
        tmp = tempfile.mkdtemp(prefix=f".{name}-{key}-", dir=root)
        try:
            model.save_pretrained(tmp, safe_serialization=True)
            _share(tmp)
            os.replace(tmp, path)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        finally:
            del model
            if on_gpu:
                torch.cuda.empty_cache()  # this process goes on to be rank 0: give the memory back
    return path


def _share(folder: str) -> None:
    """Give ``folder`` and its files the modes a plain mkdir and open would (mkdtemp's 0700, safetensors' 0600:
    other users of a shared cache could not read a preset)."""
    mask = os.umask(0)
    os.umask(mask)
    for name in os.listdir(folder):
        os.chmod(os.path.join(folder, name), 0o666 & ~mask)
    os.chmod(folder, 0o777 & ~mask)


def main(argv: list[str] | None = None) -> int:
    """``python -m harness.checkpoint MODEL [--seed N]``: draw preset ``conf/model/MODEL.yaml``, print its path."""
    ap = OneLineParser(prog="python -m harness.checkpoint")
    ap.add_argument("model", help="a preset: the name of a file in conf/model/")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    path = os.path.join(CONF_DIR, "model", f"{args.model}.yaml")
    preset = OmegaConf.to_container(OmegaConf.load(path)).get("preset") if os.path.isfile(path) else None
    if not preset:
        ap.error(f"{args.model!r} is not a preset in conf/model/")
    if args.seed < 0:  # as the harness's seed=
        ap.error(f"--seed must be >= 0, got {args.seed}")
    print(materialize(args.model, preset, seed=args.seed))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
