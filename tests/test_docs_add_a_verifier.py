"""docs/add-a-verifier.md is the test: its ```python blocks run in order, in one namespace, as the
page tells a reader to copy them into a script, and what they compute is checked here (so a page
whose own asserts were dropped still fails). Tracebacks point at the page's own line numbers."""

from __future__ import annotations

import re
import sys
import types
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from speculab.config import PROJECT_ROOT
from speculab.registry import ALGORITHMS

PAGE = PROJECT_ROOT / "docs" / "add-a-verifier.md"
BLOCK = re.compile(r"^```python\n(.*?)^```$", re.DOTALL | re.MULTILINE)


def python_blocks(text: str) -> list[tuple[int, str]]:
    """(line index of the block's first code line, its code) for every ```python block, in order."""
    return [(text.count("\n", 0, m.start(1)), m.group(1)) for m in BLOCK.finditer(text)]


def page_script(text: str) -> str:
    """The blocks as one script, each at its own lines of the page (the rest blank): the script a
    reader gets by copying them in order, with tracebacks that name the page's lines."""
    lines = [""] * (text.count("\n") + 1)
    for first, code in python_blocks(text):
        for offset, line in enumerate(code.splitlines()):
            lines[first + offset] = line
    return "\n".join(lines)


@pytest.fixture(scope="module")
def page() -> Iterator[dict[str, Any]]:
    """The script's namespace after it ran as a module under a name other than "__main__" (so
    its launcher does not start; dataclasses look their module up in sys.modules)."""
    module = types.ModuleType("add_a_verifier_page")
    sys.modules[module.__name__] = module
    try:
        exec(compile(page_script(PAGE.read_text()), str(PAGE), "exec", dont_inherit=True), module.__dict__)
        yield module.__dict__
    finally:
        del sys.modules[module.__name__]


def test_the_page_has_every_step() -> None:
    assert len(python_blocks(PAGE.read_text())) >= 8


def test_the_example_is_registered_only_while_the_page_asks(page: dict[str, Any]) -> None:
    assert "first_token" not in ALGORITHMS
    assert page["FIRST_TOKEN"].name == "first_token" and not page["FIRST_TOKEN"].multi_path


def test_batched_verifier_replays_the_reference(page: dict[str, Any]) -> None:
    assert page["verdict"].rows() == page["replayed"]
    assert set(page["verdict"].tau.tolist()) == {0, 1}


def test_exact_certificate_passes(page: dict[str, Any]) -> None:
    """One round for V <= 4, L <= 2, K = 1 at several temperatures; several rounds chained."""
    rows = page["certified"]
    assert {row[0] for row in rows} == {2, 3, 4} and {row[1] for row in rows} == {1, 2}
    assert {row[4] for row in rows} == {0.0, 0.5, 1.0}
    assert max(row[-1] for row in rows) < 1e-9
    assert page["decode_error"] < 1e-9
    assert page["accepted_first"] < page["accepted_token"]


def test_compiled_decide_gives_the_eager_verdict(page: dict[str, Any]) -> None:
    eager, compiled = page["eager_verdict"], page["compiled_verdict"]
    for field in ("tokens", "num_tokens", "path"):
        assert torch.equal(getattr(eager, field), getattr(compiled, field)), field


def test_greedy_decoding_equals_autoregressive(page: dict[str, Any]) -> None:
    assert page["speculative_tokens"] == page["autoregressive_tokens"]
    assert all(len(tokens) == 12 for tokens in page["speculative_tokens"])
    assert max(tau for round_ in page["sampled"].rounds for tau in round_.accepted) == 1
