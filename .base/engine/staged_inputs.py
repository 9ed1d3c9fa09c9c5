"""The static device inputs of a set of CUDA graphs, refilled before each replay by one host-to-device copy. Each graph
(a key: a decode batch bucket, a prefill token bucket) lays its fields out in one byte buffer at its own row counts, so
a step's inputs are one prefix of it: one copy where a copy per field took ~1 us of GPU time each (5-7 per step at
batch 1). Two pinned host buffers are used in turn (a pageable copy may wait for the GPU)."""

from __future__ import annotations

from collections.abc import Callable, Hashable

import numpy as np
import torch

ALIGN = 16  # bytes, each field's offset: Triton specialises a pointer argument on 16-byte alignment
Field = tuple[tuple[int, ...], torch.dtype, float]  # shape, dtype, the value a captured graph starts from


def place(fields: dict[str, Field]) -> tuple[dict[str, tuple[int, Field]], int]:
    """``fields`` laid out in their order, each at an ``ALIGN``-byte offset -> ({name: (offset, field)}, bytes)."""
    layout, end = {}, 0
    for name, (shape, dtype, fill) in fields.items():
        offset = -(-end // ALIGN) * ALIGN
        layout[name] = (offset, (shape, dtype, fill))
        end = offset + int(np.prod(shape)) * dtype.itemsize
    return layout, end


def views(buffer: torch.Tensor, layout: dict[str, tuple[int, Field]]) -> dict[str, torch.Tensor]:
    """Typed views of the uint8 ``buffer`` at ``layout``'s offsets."""
    return {name: buffer[offset:offset + int(np.prod(shape)) * dtype.itemsize].view(dtype).view(shape)
            for name, (offset, (shape, dtype, _)) in layout.items()}


class StagedInputs:
    """``layouts``: graph key -> {field name: (shape, dtype, fill value)}. ``static(key)`` gives the device tensors
    that the graph of ``key`` reads; ``stage(key, fill)`` refills them before its replay."""

    def __init__(self, layouts: dict[Hashable, dict[str, Field]], device: torch.device):
        self.layouts = {key: place(fields) for key, fields in layouts.items()}
        size = max(end for _, end in self.layouts.values())
        self.device = torch.zeros(size, dtype=torch.uint8, device=device)
        self.host = [torch.zeros(size, dtype=torch.uint8, pin_memory=True) for _ in range(2)]
        self.host_np = [{key: {name: v.numpy() for name, v in views(h, layout).items()}
                         for key, (layout, _) in self.layouts.items()} for h in self.host]
        self.copied = [torch.cuda.Event(), torch.cuda.Event()]
        self.turn = 0

    def static(self, key: Hashable) -> dict[str, torch.Tensor]:
        """The device tensors of graph ``key``, set to their fill values (the state its capture starts from)."""
        layout = self.layouts[key][0]
        out = views(self.device, layout)
        for name, (_, (_, _, fill)) in layout.items():
            out[name].fill_(fill)
        return out

    def stage(self, key: Hashable, fill: Callable[[dict[str, np.ndarray]], None]) -> None:
        """``fill`` writes every field that graph ``key`` reads into the next pinned buffer's arrays; that
        buffer's prefix, all of ``key``'s fields, goes to the device in one copy."""
        host, copied = self.host[self.turn], self.copied[self.turn]
        copied.synchronize()  # this buffer's last copy (two replays ago) has run: it may be refilled
        fill(self.host_np[self.turn][key])
        size = self.layouts[key][1]
        self.device[:size].copy_(host[:size], non_blocking=True)
        copied.record()
        self.turn ^= 1
