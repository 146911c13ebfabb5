"""One walk through the nested values a model call takes or returns (tuples, NamedTuples, lists, dicts,
dataclasses such as a DraftTree), used wherever the runtime rewrites the tensors inside them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields, is_dataclass, replace
from typing import Any


def mapped(value: Any, is_leaf: Callable[[Any], bool], leaf: Callable[[Any], Any]) -> Any:
    """`value` rebuilt with `leaf(x)` in place of every x inside it for which `is_leaf(x)`."""

    def walk(item: Any) -> Any:
        if is_leaf(item):
            return leaf(item)
        if isinstance(item, tuple) and hasattr(item, "_fields"):  # a NamedTuple takes its fields positionally
            return type(item)(*map(walk, item))
        if isinstance(item, list | tuple):
            return type(item)(map(walk, item))
        if isinstance(item, dict):
            return {key: walk(v) for key, v in item.items()}
        if is_dataclass(item) and not isinstance(item, type):
            return replace(item, **{f.name: walk(getattr(item, f.name)) for f in fields(item) if f.init})
        return item

    return walk(value)
