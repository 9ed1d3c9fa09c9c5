"""Programmatic dependent launch (PDL, compute capability >= 9.0) for the Triton decode kernels: a kernel's programs
launch once every program of the one before has started, load the weights (which no kernel of the step writes; CUTLASS
example 63's prefetch), then wait (``griddepcontrol.wait``) for its end. Rule for every kernel launched with
``launch_pdl=ENABLED``: each program calls ``gdc_wait`` before it reads an activation or writes anything, and none
returns before it. The wait covers the whole previous kernel (which waited for its own), so a later non-PDL kernel sees
every result as in a plain stream. Chosen once per process by the model runner (``set_pdl``): process-wide state."""

from __future__ import annotations

import torch

ENABLED = False  # read by the kernels' launchers as the PDL constexpr and launch option


def set_pdl(on: bool, device: torch.device) -> bool:
    """Turn PDL on for the Triton decode kernels when ``on`` and ``device`` supports it (CUDA, compute
    capability >= 9.0, a Triton that takes ``launch_pdl``); returns whether it is on."""
    global ENABLED
    ENABLED = False
    if on and device.type == "cuda" and torch.cuda.get_device_capability(device)[0] >= 9:
        try:
            from triton.backends.nvidia.compiler import CUDAOptions
        except ImportError:
            return False
        ENABLED = "launch_pdl" in CUDAOptions.__dataclass_fields__
    return ENABLED
