"""transformers' generate as the baseline: speculab's greedy tokens equal generate's on the tiny
pair (batch 1 and padded batches), assisted generation runs at the fixed L, and
benchmarks/peers.py runs end to end in its quick mode."""

from __future__ import annotations

import functools
import sys

import pytest
from transformers import AutoTokenizer

from speculab.config import Config
from speculab.config.sampling import generate_form, sampling_errors
from speculab.core.autoregressive import autoregressive
from speculab.core.engine import DecodeSettings, decode
from speculab.data import encode_prompt, load_prompts
from speculab.drafting.sampling import SamplingParams
from speculab.models import DraftModel, LMSpec, TreeTarget
from speculab.models.generate import GenerateForm, check_assisted_widths, cut_at_eos, generate, left_padded
from speculab.registry import get_verifier
from support.models import REPO, TINY_PAIR


@pytest.fixture(scope="module")
def tiny():
    tokenizer = AutoTokenizer.from_pretrained(TINY_PAIR / "target")
    prompts = [encode_prompt(p, tokenizer) for p in load_prompts("humaneval", 3)]
    target = TreeTarget(LMSpec("hf", str(TINY_PAIR / "target")))
    drafter = DraftModel(LMSpec("hf", str(TINY_PAIR / "draft")))
    return target, drafter, prompts, tokenizer.eos_token_id


def test_left_padded_and_cut_at_eos() -> None:
    ids, mask = left_padded([[5, 6, 7], [8]], pad_token_id=1)
    assert ids.tolist() == [[5, 6, 7], [1, 1, 8]] and mask.tolist() == [[1, 1, 1], [0, 0, 1]]
    assert cut_at_eos([3, 0, 1, 1], 0) == [3, 0] and cut_at_eos([3, 4], 0) == [3, 4]


@pytest.mark.parametrize("batch", [1, 3])
def test_greedy_tokens_equal_generate(tiny, batch: int) -> None:
    target, drafter, prompts, eos = tiny
    settings = DecodeSettings(1, 4, SamplingParams(0.0), 24, batch, 0, eos)
    reference = generate(target.lm.model, prompts, settings)
    assert reference.cpu_s > 0 and reference.wall_s > 0
    assert [p.tokens for p in autoregressive(target, prompts, settings).prompts] == reference.tokens
    for name in ("token", "block"):
        run = decode(target, drafter, get_verifier(name), prompts, settings)
        assert [p.tokens for p in run.prompts] == reference.tokens, name


def test_the_compiled_form_decodes_what_eager_does_and_compiles_only_untimed(tiny, monkeypatch) -> None:
    """Static cache + transformers' compile of the step (dynamo's eager backend here: the plumbing is
    ours, inductor's code is torch's): the eager greedy tokens and forward widths, one cache for units
    of different prompt widths, and one graph per batch size, traced in the untimed warm-up."""
    import transformers
    from torch._dynamo.utils import counters

    eager_backend = functools.partial(transformers.CompileConfig, backend="eager", mode=None)
    monkeypatch.setattr(transformers, "CompileConfig", eager_backend)
    target, _, prompts, eos = tiny
    settings = DecodeSettings(1, 4, SamplingParams(0.0), 24, 2, 0, eos)  # units of 2 and 1 prompts
    reference = generate(target.lm.model, prompts, settings)
    form, warmed = GenerateForm.of("compiled", prompts, 24), set[int]()
    assert form == GenerateForm(True, max(map(len, prompts)) + 24)
    counters.clear()
    compiled = generate(target.lm.model, prompts, settings, form=form, warmed=warmed)
    assert compiled.tokens == reference.tokens and compiled.call_widths == reference.call_widths
    assert warmed == {2, 1} and counters["stats"]["unique_graphs"] == 2
    traced = dict(counters["frames"])
    again = generate(target.lm.model, prompts, settings, form=form, warmed=warmed)
    assert again.tokens == reference.tokens and dict(counters["frames"]) == traced  # nothing traced again


def test_auto_is_compiled_on_a_gpu_and_eager_on_the_cpu_and_a_typo_is_refused() -> None:
    assert generate_form("auto", "cuda:0") == "compiled" and generate_form("auto", "cpu") == "eager"
    assert generate_form("eager", "cuda") == "eager" and generate_form("compiled", "cpu") == "compiled"
    cfg = Config()
    cfg.measure.generate = "fast"
    assert sampling_errors(cfg.sampling, cfg.measure) == ["measure.generate=fast: must be one of auto, compiled, eager"]


def test_assisted_generation_runs_at_fixed_length(tiny) -> None:
    target, drafter, prompts, eos = tiny
    settings = DecodeSettings(1, 3, SamplingParams(0.0), 24, 1, 0, eos)
    assisted = generate(target.lm.model, prompts[:1], settings, assistant=drafter.lm.model)
    assert assisted.tokens == generate(target.lm.model, prompts[:1], settings).tokens
    assert assisted.call_widths[0] == len(prompts[0]) + 3 and assisted.call_widths.count(4) > 1
    check_assisted_widths(assisted.call_widths, 3, 1)
    with pytest.raises(RuntimeError, match="L=3"):
        check_assisted_widths([137, 4, 6, 4, 3], 3, 1)  # a round of 5 candidates
    with pytest.raises(RuntimeError, match="L=3"):
        check_assisted_widths([137, 2, 2, 4, 3], 3, 1)  # mostly shorter rounds


def test_peers_benchmark_quick(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(REPO)
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    sys.modules.pop("peers", None)
    import peers

    rows = peers.main(["--quick", "--csv", str(tmp_path / "peers.csv")])
    assert {row[2] for row in rows} >= {"generate", "assisted", "speculab autoregressive", "speculab block"}
    assert all(row[-1] in ("-", "2/2") for row in rows)  # T=0 tokens equal generate's
    assert len((tmp_path / "peers.csv").read_text().splitlines()) == 1 + len(rows)


def test_families_benchmark_quick(monkeypatch) -> None:
    """benchmarks/families.py runs every family and the engine's greedy tokens equal generate's."""
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    sys.modules.pop("families", None)
    import families

    rows = families.main(["--reps", "1", "--prompts", "2", "--max-new-tokens", "4", "--layers", "2", "--hidden", "64"])
    assert [row[0] for row in rows] == list(families.FAMILIES)
    assert all(row[1] == "lean" for row in rows)
    assert all(row[-1] == "2/2" for row in rows)
