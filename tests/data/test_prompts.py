"""Prompt datasets: HumanEval, JSONL, the HF loaders (with a stand-in `datasets`), encoding."""

from __future__ import annotations

import json
import sys
import types
from importlib.machinery import ModuleSpec
from pathlib import Path

import pytest
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import WhitespaceSplit
from transformers import PreTrainedTokenizerFast

from speculab.config import PROJECT_ROOT
from speculab.data import DATASETS, HF_SPECS, Prompt, check_dataset, encode_prompt, load_prompts
from speculab.data.prompts import chosen

CHAT_TEMPLATE = (
    "{% for m in messages %}<|user|> {{ m['content'] }} {% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def test_humaneval_loads_all_in_order_and_respects_num_prompts() -> None:
    prompts = load_prompts("humaneval")
    assert len(prompts) == 164
    assert [p.id for p in prompts[:2]] == ["HumanEval/0", "HumanEval/1"]
    assert prompts[0].text.startswith("from typing import List") and not prompts[0].chat
    assert load_prompts("humaneval", num_prompts=3) == prompts[:3]


def test_a_seeded_sample_is_drawn_from_the_whole_dataset_in_its_order() -> None:
    """A random sample, not the head of the file: a dataset stored by category would otherwise give
    one category. The same seed gives the same prompts; every prompt when all are asked for."""
    everything = load_prompts("humaneval")
    sample = load_prompts("humaneval", 16, sample_seed=0)
    indices = [everything.index(p) for p in sample]
    assert len(set(indices)) == 16 and indices == sorted(indices) and max(indices) > 16
    assert load_prompts("humaneval", 16, sample_seed=0) == sample != load_prompts("humaneval", 16, sample_seed=1)
    assert load_prompts("humaneval", None, sample_seed=3) == everything
    assert chosen(10, 4, None) == [0, 1, 2, 3] and chosen(3, 5, 0) == [0, 1, 2]


def test_dataset_configs_match_the_registry() -> None:
    conf = PROJECT_ROOT / "conf" / "dataset"
    assert sorted(p.stem for p in conf.glob("*.yaml")) == sorted(DATASETS)
    for name in DATASETS:
        assert f"name: {name}\n" in (conf / f"{name}.yaml").read_text()


def test_unknown_name_lists_allowed_names() -> None:
    with pytest.raises(ValueError, match="dataset.name") as err:
        load_prompts("squad")
    assert all(name in str(err.value) for name in DATASETS)


def test_bad_num_prompts_names_the_field() -> None:
    with pytest.raises(ValueError, match="dataset.num_prompts"):
        load_prompts("humaneval", num_prompts=0)


def _write(tmp_path: Path, *lines: str) -> str:
    path = tmp_path / "prompts.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_jsonl_loads_prompts_ids_and_chat_flag(tmp_path: Path) -> None:
    path = _write(tmp_path, json.dumps({"prompt": "a"}), "", json.dumps({"prompt": "b", "id": "x", "chat": True}))
    assert load_prompts("jsonl", path=path) == [Prompt("prompts/1", "a", False), Prompt("x", "b", True)]
    assert load_prompts("jsonl", num_prompts=1, path=path) == [Prompt("prompts/1", "a", False)]


def test_jsonl_prompts_carry_their_category(tmp_path: Path) -> None:
    path = _write(tmp_path, json.dumps({"prompt": "a", "category": "coding"}), json.dumps({"prompt": "b"}))
    assert [p.category for p in load_prompts("jsonl", path=path)] == ["coding", None]
    shipped = Path(__file__).parents[1] / "fixtures" / "mt_bench_style.jsonl"
    assert {p.category for p in load_prompts("jsonl", path=str(shipped))} == {"coding", "writing"}


@pytest.mark.parametrize("category", [3, "", "two words", "x" * 65])
def test_a_jsonl_category_that_cannot_name_a_metric_is_refused_naming_the_line(tmp_path: Path, category) -> None:
    path = _write(tmp_path, json.dumps({"prompt": "a", "category": category}))
    with pytest.raises(ValueError, match=r"prompts.jsonl:1: the optional `category` field must be a string of 1-64"):
        load_prompts("jsonl", path=path)


@pytest.mark.parametrize("path", [None, "/nonexistent/prompts.jsonl"])
def test_jsonl_without_a_file_names_dataset_path(path: str | None) -> None:
    for check in (lambda: check_dataset("jsonl", path), lambda: load_prompts("jsonl", path=path)):
        with pytest.raises(ValueError, match="dataset.path"):
            check()


@pytest.mark.parametrize(
    "bad, message",
    [
        ("{not json", "not valid JSON"),
        ('{"text": "a"}', "`prompt` field"),
        ('["a"]', "`prompt` field"),
        ('{"prompt": "a", "chat": "yes"}', "`chat` field"),
    ],
)
def test_jsonl_bad_line_names_line_number(tmp_path: Path, bad: str, message: str) -> None:
    path = _write(tmp_path, json.dumps({"prompt": "ok"}), bad)
    with pytest.raises(ValueError, match=rf"prompts\.jsonl:2: .*{message}"):
        load_prompts("jsonl", path=path)


def test_a_line_that_is_not_utf8_is_named_with_its_file_and_column(tmp_path: Path) -> None:
    path = tmp_path / "prompts.jsonl"
    path.write_bytes(b'{"prompt": "ok"}\n{"prompt": "caf\xe9"}\n')
    with pytest.raises(ValueError, match=rf"dataset\.path={path}:2: not UTF-8 \(byte 0xe9 at column 16\)"):
        load_prompts("jsonl", path=str(path))


def _fake_datasets(monkeypatch: pytest.MonkeyPatch, load_dataset) -> None:
    fake = types.ModuleType("datasets")
    fake.__spec__ = ModuleSpec("datasets", None)
    fake.load_dataset = load_dataset
    monkeypatch.setitem(sys.modules, "datasets", fake)


def test_hf_loader_reads_the_spec_table(monkeypatch: pytest.MonkeyPatch) -> None:
    rows = {
        "tatsu-lab/alpaca": [{"instruction": "Sort.", "input": "3 1 2"}, {"instruction": "Hi.", "input": ""}],
        "HuggingFaceH4/mt_bench_prompts": [{"prompt": ["first turn", "second turn"], "category": "Humanities & Arts"}],
    }
    calls = []

    def load_dataset(hub_id: str, config: str | None, split: str) -> list[dict]:
        calls.append((hub_id, config, split))
        return rows[hub_id]

    _fake_datasets(monkeypatch, load_dataset)
    assert load_prompts("alpaca") == [Prompt("alpaca/0", "Sort.\n\n3 1 2", True), Prompt("alpaca/1", "Hi.", True)]
    assert load_prompts("mt_bench", num_prompts=5) == [Prompt("mt_bench/0", "first turn", True, "Humanities_Arts")]
    assert calls == [("tatsu-lab/alpaca", None, "train"), ("HuggingFaceH4/mt_bench_prompts", None, "train")]


def _offline(*args, **kwargs):
    raise ConnectionError("Couldn't reach 'openai/gsm8k' on the Hub (OfflineModeIsEnabled)")


def test_hf_loader_unavailable_raises_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_datasets(monkeypatch, _offline)
    with pytest.raises(RuntimeError) as err:
        load_prompts("gsm8k", num_prompts=2)
    message = str(err.value)
    for needle in (
        "'gsm8k'",
        HF_SPECS["gsm8k"].hub_id,
        "the Hub does not answer",
        "not in the local",
        "HF_HUB_OFFLINE=1",
        "HF_DATASETS_CACHE",
        "dataset=jsonl dataset.path=",
    ):
        assert needle in message


def test_check_dataset_is_cheap(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _fake_datasets(monkeypatch, _offline)  # would fail if check_dataset downloaded a benchmark
    local = tmp_path / "prompts.jsonl"
    local.write_text('{"prompt": "def add(a, b):"}\n')
    for name in DATASETS:
        check_dataset(name, str(local) if name == "jsonl" else None)


def test_the_locked_datasets_package_loads_a_dataset_through_the_presets_code_path(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`datasets` is in the lock: MATH-500's loader, through the real package, reads a local directory
    named as its hub id (what `datasets.load_dataset` looks at first), offline."""
    folder = tmp_path / HF_SPECS["math500"].hub_id
    folder.mkdir(parents=True)
    (folder / "test.jsonl").write_text("".join(json.dumps({"problem": f"What is {i} + {i}?"}) + "\n" for i in range(5)))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "cache"))
    prompts = load_prompts("math500", 3, sample_seed=None)
    assert prompts == [Prompt(f"math500/{i}", f"What is {i} + {i}?", True) for i in range(3)]


def _tokenizer(chat_template: str | None) -> PreTrainedTokenizerFast:
    words = ["[UNK]", "<|user|>", "<|assistant|>", "def", "add", "hello"]
    core = Tokenizer(WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    core.pre_tokenizer = WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="[UNK]")
    tokenizer.chat_template = chat_template
    return tokenizer


def test_encode_prompt_uses_chat_template_only_for_chat_prompts_when_present() -> None:
    chat, plain = _tokenizer(CHAT_TEMPLATE), _tokenizer(None)
    instruction, code = Prompt("i", "hello add", True), Prompt("c", "def add", False)
    assert encode_prompt(instruction, chat) == [1, 5, 4, 2]
    assert encode_prompt(instruction, plain) == [5, 4]
    assert encode_prompt(code, chat) == encode_prompt(code, plain) == [3, 4]


def test_encode_prompt_refuses_empty_encoding() -> None:
    with pytest.raises(ValueError, match="'blank'"):
        encode_prompt(Prompt("blank", "", False), _tokenizer(None))
