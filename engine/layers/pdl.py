"""Programmatic dependent launch (PDL) for the Triton decode kernels: the next kernel starts while this
one finishes.

At batch 1 a decode step is ~180 short kernels, and each launch waits for the one before to drain: a gap
of a few microseconds beside kernels of 3-8 us (issue 27). With PDL (CUDA, compute capability >= 9.0,
``cudaLaunchAttributeProgrammaticStreamSerialization``) a kernel's programs are launched as soon as every
program of the kernel before has started, and wait (``griddepcontrol.wait``) for its end before touching
anything it writes. What no kernel of the step writes, the weights, they load before waiting: the GEMVs
read their weights while the kernel before them still runs (the weight prefetch of CUTLASS's example 63).

Correctness rule for every kernel launched with ``launch_pdl=ENABLED``: each program calls
``gdc_wait`` before it reads an activation or writes anything, and no program returns before it.
``gdc_wait`` waits for the whole previous kernel, which itself waited for its own previous one, so a
later kernel launched without PDL sees every result as in a plain stream.

Chosen once per process by the model runner (``set_pdl``), like the matmul: process-wide state.
"""

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
