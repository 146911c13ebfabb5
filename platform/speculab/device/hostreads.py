"""Where a value may decide a shape: the host-read rule every module that reads tensors follows.

A host read of a device value (`.item()`, a tensor's truth value, `.tolist()`, `nonzero`, a
blocking copy) waits for every kernel queued before it, and under capture (CUDA graphs,
`torch.compile`) it breaks the graph. On the CPU it is free, and letting data choose a shape or a
trip count (skip finished rows, trim padding, stop a loop early) is what keeps the CPU fast. So
each such choice asks `reads_free` first and otherwise takes a static-shape form that gives the
same result: the code a GPU runs.

`device_form` makes the CPU take the GPU's forms too, so that a CPU test counts the host reads a
decode round makes on a GPU (tests/support/host_reads.py) and checks that both forms agree.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import torch

_DEVICE_FORM: ContextVar[bool] = ContextVar("speculab_device_form", default=False)


# t: any tensor the caller would read
def reads_free(t: torch.Tensor) -> bool:
    """Whether reading ``t``'s values on the host is free: it lives on the CPU, no graph is being
    captured (``torch.compile``) and the CPU is not asked to run the GPU's forms (`device_form`)."""
    return t.is_cpu and not torch.compiler.is_compiling() and not _DEVICE_FORM.get()


@contextmanager
def device_form() -> Iterator[None]:
    """In the block, the CPU runs the static-shape forms a GPU runs (`reads_free` is False)."""
    token = _DEVICE_FORM.set(True)
    try:
        yield
    finally:
        _DEVICE_FORM.reset(token)


# t: a tensor the host made (token ids, uniforms, masks of known lengths)
def upload(t: torch.Tensor, device: torch.device | str) -> torch.Tensor:
    """``t`` on ``device``. To a GPU from pinned memory without waiting: a copy from pageable memory
    waits for the device like a host read (torch's sync debug mode counts it). The pinned copy stays
    reserved until the transfer is done (torch's caching host allocator records it)."""
    if torch.device(device).type != "cuda" or not t.is_cpu:
        return t.to(device)
    return t.pin_memory().to(device, non_blocking=True)
