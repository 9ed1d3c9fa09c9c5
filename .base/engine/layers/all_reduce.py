"""The tensor-parallel layers' all-reduce (``llm.all_reduce``): torch.distributed (NCCL; gloo on CPU) or, on CUDA,
PyTorch's symmetric-memory kernels: one kernel reads the peers' copies of a buffer mapped once (before CUDA-graph
capture) over NVLink, about half NCCL's latency on small messages; never NVLink multicast. By size (bytes):
``<= one_shot_max`` one-shot, up to the buffer's size two-shot; larger, float16 or not a multiple of 4 bytes: NCCL.
Thresholds measured at tp=2 (``scripts/all_reduce_sizes.py``), halved per doubling of tp."""

from __future__ import annotations

import math
import os
import warnings

import torch
import torch.distributed as dist

from common import first_line

from .gemm import linear

# Largest message (bytes) sent one-shot (each rank reads every peer's buffer), by tp size.
ONE_SHOT_MAX_BYTES = {2: 1 << 20, 4: 512 << 10, 8: 256 << 10}
SYMM_MAX_BYTES = 64 << 20  # the symmetric buffer's size cap; larger messages go through NCCL
SYMM_DTYPES = (torch.bfloat16, torch.float32)  # what PyTorch's symmetric-memory kernels reduce
_set_up_in_process = False  # symmetric memory was set up here before (by an earlier engine)


class TorchAllReduce:
    """Sum over the tensor-parallel group with ``torch.distributed`` (NCCL or gloo, in place)."""

    def __init__(self, name: str):
        self.name = name

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """x ``[...]`` -> the sum over ranks, same shape (may be ``x`` itself)."""
        dist.all_reduce(x)
        return x

    def matmul(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """x ``[N, in/tp]``, weight ``[out, in/tp]`` -> ``x @ weight.T`` ``[N, out]`` summed over ranks."""
        return self(linear(x, weight))


class SymmMemAllReduce(TorchAllReduce):
    """Sum over the default process group through PyTorch's symmetric-memory kernels (CUDA), with a buffer of
    ``numel`` elements of ``dtype`` (bfloat16 or float32) on ``device``. Raises RuntimeError (from PyTorch):
    symmetric memory cannot be set up here (the caller falls back to NCCL)."""

    def __init__(self, world_size: int, numel: int, dtype: torch.dtype, device: torch.device):
        super().__init__("symm_mem")
        os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")  # never NVLink multicast
        import torch.distributed._symmetric_memory as symm_mem

        self.group_name = dist.group.WORLD.group_name
        enable = getattr(symm_mem, "enable_symm_mem_for_group", None)  # needed before torch 2.9, deprecated after
        if enable is not None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)
                enable(self.group_name)
        self.buf = symm_mem.empty(numel, dtype=dtype, device=device)
        symm_mem.rendezvous(self.buf, self.group_name)
        self.one_shot_max = ONE_SHOT_MAX_BYTES.get(world_size, min(ONE_SHOT_MAX_BYTES.values()))
        self.ops = torch.ops.symm_mem

    def _view(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor | None:
        n = math.prod(shape)
        if dtype != self.buf.dtype or n > self.buf.numel() or (n * self.buf.element_size()) % 4:
            return None
        return self.buf[:n].view(shape)

    def _reduce(self, view: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(view)
        small = view.numel() * view.element_size() <= self.one_shot_max
        op = self.ops.one_shot_all_reduce_out if small else self.ops.two_shot_all_reduce_out
        op(view, "sum", self.group_name, out)
        return out

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        view = self._view(tuple(x.shape), x.dtype)
        if view is None:
            return super().__call__(x)
        view.copy_(x)
        return self._reduce(view)

    def matmul(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        view = self._view((x.shape[0], weight.shape[0]), x.dtype)
        if view is None:
            return super().matmul(x, weight)
        linear(x, weight, out=view)  # the partial sum lands in the symmetric buffer: no copy in
        return self._reduce(view)


def make_all_reduce(mode: str, world_size: int, device: torch.device, dtype: torch.dtype, numel: int, num_nodes: int):
    """The group's all-reduce for ``mode`` (auto, nccl or symm_mem), or None at tp=1. ``auto``: symm_mem on
    CUDA for bf16/float32 where every rank, all on one node, can set it up, else NCCL; CPU: gloo. ``numel``:
    the largest message worth a symmetric buffer (elements, capped at ``SYMM_MAX_BYTES``). Raises
    RuntimeError: ``mode="symm_mem"`` and symmetric memory could not be set up on some rank."""
    if world_size == 1:
        return None
    if device.type != "cuda":
        return TorchAllReduce("gloo")
    global _set_up_in_process
    impl, reason = None, ""
    if num_nodes > 1:
        reason = f"the ranks are on {num_nodes} nodes"
    elif _set_up_in_process:
        # PyTorch keeps a group's rendezvous store for the process's life, keyed by group name: a default
        # group re-created after destroy_process_group() would wait on the first one's (torch 2.11: a hang).
        reason = "an earlier engine in this process set up symmetric memory (PyTorch cannot set it up twice)"
    elif dtype not in SYMM_DTYPES:
        reason = f"PyTorch's symmetric-memory kernels reduce bf16/float32, not {dtype}"
    # Agree before the collective rendezvous: a fresh worker may try where rank 0 (an earlier engine) may not.
    may = torch.tensor([mode != "nccl" and not reason], dtype=torch.int32, device=device)
    dist.all_reduce(may, op=dist.ReduceOp.MIN)
    if bool(may.item()):
        numel = max(1, min(numel, SYMM_MAX_BYTES // torch.empty(0, dtype=dtype).element_size()))
        try:
            impl = SymmMemAllReduce(world_size, numel, dtype, device)
            _set_up_in_process = True
        except Exception as e:  # no driver support, old torch: NCCL instead (agreed below)
            reason = f"{type(e).__name__}: {first_line(e)}"
    elif mode != "nccl" and not reason:
        reason = "another rank cannot use it"
    ok = torch.tensor([impl is not None], dtype=torch.int32, device=device)
    dist.all_reduce(ok, op=dist.ReduceOp.MIN)
    if bool(ok.item()):
        return impl
    if mode != "nccl":
        warnings.warn(f"tensor-parallel all-reduce: NCCL, not symmetric memory ({reason or 'another rank failed'})",
                      stacklevel=2)
    if mode == "symm_mem":
        raise RuntimeError(f"llm.all_reduce=symm_mem: symmetric memory is not available on every rank ({reason})")
    return TorchAllReduce("nccl")
