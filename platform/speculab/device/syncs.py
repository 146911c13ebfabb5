"""Host synchronisations with a CUDA device: counted (`host_syncs_per_round`), or kept out of a count.

A host read of a device value (`.item()`, `.tolist()`, a tensor's truth value, a blocking copy,
`nonzero`) waits for every kernel queued before it: a decode round that reads the device a dozen
times drains the launch queue a dozen times, which CUDA graphs cannot hide. torch's sync debug
mode warns at each such call; counting its warnings over an untimed decode gives the count.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager

import torch

# What torch's CUDA sync debug mode warns at every synchronising call (c10/cuda/CUDAFunctions.cpp).
SYNC_WARNING = "called a synchronizing CUDA operation"


@contextmanager
def counting_host_syncs(enabled: bool = True) -> Iterator[list[int]]:
    """Count the CUDA synchronisations in the block (a host read of a device value: `.item()`,
    `.tolist()`, a boolean of a tensor, a blocking copy, `nonzero`) with torch's sync debug mode,
    which warns at each one; yields a list that holds the count after the block, and stays empty
    where this process runs no CUDA work (on the CPU nothing waits for a device). The warnings
    cost microseconds each: count an untimed run (the warm-up), not a measured one."""
    counted: list[int] = []
    if not (enabled and torch.cuda.is_available() and torch.cuda.is_initialized()):
        yield counted
        return
    mode = torch.cuda.get_sync_debug_mode()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            yield counted
        finally:
            torch.cuda.set_sync_debug_mode(mode)
    counted.append(sum(SYNC_WARNING in str(w.message) for w in caught))


@contextmanager
def sync_debug_off() -> Iterator[None]:
    """No sync debug warnings in the block (a one-off setup, as capturing a CUDA graph, is not a round's host read)."""
    if not torch.cuda.is_available():
        yield
        return
    mode = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode(0)
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(mode)
