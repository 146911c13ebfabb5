"""Host reads counted on the CPU: what a GPU would wait for, seen without one.

`counting_host_reads` records, by the speculab line that made it, each call that reads a tensor's
value on the host: `item` and a tensor's truth value (`_local_scalar_dense`), `tolist`, `numpy`,
`cpu`, and the ops whose output shape a value decides (`nonzero`, boolean indexing,
`masked_select`, `repeat_interleave` without an output size, `unique`). Run under
`speculab.device.hostreads.device_form`, the count is what a decode round reads on a GPU; a tensor the
host made itself (a list of rows turned into a tensor) counts too, although on a GPU reading it
waits for nothing, so the count is an upper bound. On CUDA `runtime/host_syncs_per_round` counts
the same reads by torch's sync debug mode.
"""

from __future__ import annotations

import traceback
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import speculab

# aten ops that read a value on the host, or whose output's shape a value decides
READ_OPS = frozenset(
    {
        "aten._local_scalar_dense.default",
        "aten.item.default",  # in inference mode, what item() and int() dispatch
        "aten.is_nonzero.default",  # in inference mode, what bool() dispatches
        "aten.nonzero.default",
        "aten.masked_select.default",
        "aten.repeat_interleave.Tensor",
        "aten._unique2.default",
        "aten.unique_consecutive.default",
    }
)
# Tensor methods that read on the host without reaching the dispatcher on the CPU
READ_METHODS = ("tolist", "numpy", "cpu")
# The package's own folder: a checkout may be named `speculab` too (as `git clone` names it), and this
# helper's frames, under tests/, must not count as the package's.
PACKAGE = Path(speculab.__file__).parent


def site_of(stack: Sequence[traceback.FrameSummary], package: Path = PACKAGE) -> str:
    """`module.py:line function` of the innermost frame of `stack` in a module of `package`."""
    for frame in reversed(stack):
        if Path(frame.filename).is_relative_to(package):
            return f"{Path(frame.filename).relative_to(package).as_posix()}:{frame.lineno} {frame.name}"
    return "?"


def _site() -> str:
    """The site of the read being made (`site_of` this thread's stack)."""
    return site_of(traceback.extract_stack())


def _reads(func: Any, args: tuple[Any, ...]) -> bool:
    name = str(func)
    if name == "aten.index.Tensor":  # boolean indexing: as many rows as the mask holds
        return any(i is not None and i.dtype == torch.bool for i in args[1])
    return name in READ_OPS


class _ReadOps(TorchDispatchMode):
    def __init__(self, sites: Counter[str]) -> None:
        super().__init__()
        self.sites = sites

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        if _reads(func, args):
            self.sites[_site()] += 1
        return func(*args, **(kwargs or {}))


@contextmanager
def counting_host_reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[str]]:
    """Count the host reads in the block, by site (`_site`)."""
    sites: Counter[str] = Counter()
    for name in READ_METHODS:
        method = getattr(torch.Tensor, name)

        def counted(self: torch.Tensor, *args: Any, _method: Any = method, **kwargs: Any) -> Any:
            sites[_site()] += 1
            return _method(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counted)
    try:
        with _ReadOps(sites):
            yield sites
    finally:
        for name in READ_METHODS:
            monkeypatch.setattr(torch.Tensor, name, getattr(torch._C.TensorBase, name))
