"""A checkpoint's weights as they are stored and as they load: each tensor's shape and file from the
safetensors headers (`stored_tensors`, no tensor data read), and `refuse_non_finite`, the check of the
weights' values a loader runs once they are read: one sum a tensor in its own dtype (a NaN or an inf
anywhere makes it non-finite), one more read of the weights at memory speed (benchmarks/RESULTS.md), and
where a sum is not finite the element-wise check (a float16 sum of finite weights can pass 65504), then
`WeightsError` naming the file and the tensor."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import torch
from safetensors import safe_open

from speculab.models.families import is_dtensor
from speculab.models.tp import checkpoint_files

Shape = tuple[int, ...]


class WeightsError(ValueError):
    """Weights a run cannot use, found as they load (non-finite values): one line naming the file and tensor."""


@dataclass(frozen=True)
class Stored:
    """A tensor as a checkpoint's header gives it: its shape, the weights file (a name in the dir) and its
    stored dtype as safetensors names it (F32, BF16, I8, ...)."""

    shape: Shape
    file: str
    dtype: str


def stored_tensors(path: Path, files: Iterable[str]) -> dict[str, Stored]:
    """Every tensor of the checkpoint's safetensors `files` (names in `path`), from their headers."""
    stored: dict[str, Stored] = {}
    for name in files:
        with safe_open(str(path / name), framework="pt") as header:
            keys = header.keys()  # a list: the file's handle is not iterable
            slices = {key: header.get_slice(key) for key in keys}
            stored |= {key: Stored(tuple(t.get_shape()), name, t.get_dtype()) for key, t in slices.items()}
    return stored


def refuse_non_finite(path: str | Path, tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
    """WeightsError naming the first tensor with a NaN or an inf (a tensor-parallel shard: this rank's part)."""
    for name, tensor in tensors:
        local = cast(Any, tensor).to_local() if is_dtensor(tensor) else tensor
        if not local.is_floating_point() or torch.isfinite(local.sum()):  # at memory speed, in its own dtype
            continue
        if not torch.isfinite(local).all():  # not a float16 sum of finite weights past 65504: a NaN or an inf
            where = _file_of(Path(path), name)
            raise WeightsError(
                f"{where}: tensor {name} holds NaN or inf values; a run on it decodes noise: download or save the "
                "checkpoint again"
            )


def _file_of(path: Path, name: str) -> Path:
    """The weights file that holds tensor `name` (the checkpoint's dir where the headers do not say)."""
    try:
        stored = stored_tensors(path, [f for f in checkpoint_files(path) if f.endswith(".safetensors")])
    except (FileNotFoundError, OSError):
        return path
    return path / stored[name].file if name in stored else path
