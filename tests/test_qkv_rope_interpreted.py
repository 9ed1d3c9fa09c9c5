"""``qkv_rope`` (the batch-1 QKV with q/k norm and RoPE split off the decode kernel) and the decode kernel's
``qk_scale`` mode, run by Triton's interpreter on the CPU (``TRITON_INTERPRET=1``, in a fresh process): QKV then
decode attention as the engine runs them today (``gemv(norm=)``, then ``qk_norm`` in the kernel) and split this way
agree within float32 rounding; the split way also against transformers' formula in float64, and the heads' summed
squares against the projection's."""

from __future__ import annotations

import pytest
from helpers import run_interpreted

pytest.importorskip("triton")

CHECK = r"""
import sys
import torch
sys.path.insert(0, "tests")
from helpers import check_qkv_rope

check_qkv_rope("cpu", torch.float32, 1e-5)
print("ok")
"""


@pytest.mark.slow
def test_qkv_rope_then_scaled_decode_matches_the_fused_path():
    assert run_interpreted(CHECK) == "ok"
