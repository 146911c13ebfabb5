"""The tiny target/draft pair shipped in assets/tiny-pycode loads like any HF checkpoint
and keeps the promises its README makes (shared vocabulary, sizes, fp16/bf16 on disk).
Timing is not re-measured here: see train_stats.json."""

from __future__ import annotations

import json
import math
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from support.models import REPO

ASSETS = REPO / "assets"
PAIR = ASSETS / "tiny-pycode"
SNIPPET = (
    'def add(a: int, b: int) -> int:\n    """Return a + b.\n\n    >>> add(2, 3)\n    5\n    """\n    return a + b\n'
)
ROLES = ("target", "draft")


@pytest.fixture(scope="module")
def models() -> dict[str, torch.nn.Module]:
    return {r: AutoModelForCausalLM.from_pretrained(PAIR / r, dtype=torch.float32).eval() for r in ROLES}


@pytest.fixture(scope="module")
def tokenizers() -> dict:
    return {r: AutoTokenizer.from_pretrained(PAIR / r) for r in ROLES}


def safetensors_dtypes(path: Path) -> set[str]:
    """Tensor dtypes from a safetensors header (8-byte length, then JSON)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    return {v["dtype"] for k, v in header.items() if k != "__metadata__"}


def test_pair_is_llama_and_shares_vocab(models, tokenizers):
    t, d = models["target"], models["draft"]
    assert t.config.model_type == d.config.model_type == "llama"
    assert t.config.vocab_size == d.config.vocab_size == len(tokenizers["target"]) == len(tokenizers["draft"])
    assert tokenizers["target"].get_vocab() == tokenizers["draft"].get_vocab()


def test_sizes(models):
    n_t = sum(p.numel() for p in models["target"].parameters())
    n_d = sum(p.numel() for p in models["draft"].parameters())
    assert n_t >= 5_000_000
    assert n_d < n_t / 2
    assert models["draft"].config.num_hidden_layers < models["target"].config.num_hidden_layers


def test_weights_half_precision_on_disk():
    for role in ROLES:
        files = list((PAIR / role).glob("*.safetensors"))
        assert files, f"no safetensors in {role}"
        for f in files:
            assert safetensors_dtypes(f) <= {"F16", "BF16"}, f
        assert json.loads((PAIR / role / "config.json").read_text())["dtype"] in ("float16", "bfloat16")


def test_total_size_at_most_40_mb():
    total = sum(f.stat().st_size for f in ASSETS.rglob("*") if f.is_file())
    assert total <= 40 * 2**20, f"{total / 2**20:.1f} MB"


def test_tokenizer_round_trip_and_specials(tokenizers):
    tok = tokenizers["target"]
    ids = tok(SNIPPET)["input_ids"]
    assert ids == tokenizers["draft"](SNIPPET)["input_ids"]
    assert ids[0] == tok.bos_token_id  # every training file starts with <|endoftext|>
    assert tok.decode(ids, skip_special_tokens=True) == SNIPPET
    assert tok.decode(tok(SNIPPET, add_special_tokens=False)["input_ids"]) == SNIPPET
    assert tok.eos_token == "<|endoftext|>" and tok.eos_token_id is not None
    assert tok.pad_token_id is not None and tok.pad_token_id != tok.eos_token_id
    assert tok.chat_template is None  # base models


def test_config_special_ids_match_tokenizer(models, tokenizers):
    tok = tokenizers["target"]
    for model in models.values():
        assert model.config.eos_token_id == tok.eos_token_id
        assert model.config.bos_token_id == tok.bos_token_id
        assert model.config.pad_token_id == tok.pad_token_id


@torch.inference_mode()
def test_models_know_python(models, tokenizers):
    """Trained weights, not noise: low perplexity on a snippet and close next-token laws."""
    ids = torch.tensor([tokenizers["target"](SNIPPET)["input_ids"]])
    logits = {r: m(ids).logits[0, :-1].float() for r, m in models.items()}
    for r, lg in logits.items():
        nll = torch.nn.functional.cross_entropy(lg, ids[0, 1:]).item()
        assert math.exp(nll) < 200, (r, math.exp(nll))  # untrained: ~vocab size (4096)
    alpha = torch.minimum(logits["target"].softmax(-1), logits["draft"].softmax(-1)).sum(-1).mean().item()
    assert alpha > 0.5


def test_readme_and_stats_present():
    stats = json.loads((PAIR / "train_stats.json").read_text())
    assert stats["metrics"]["decode_ratio"] >= 3.0
    assert stats["target"]["params"] >= 5_000_000
    assert "jobs/train_tiny.py" in (PAIR / "README.md").read_text()


@torch.inference_mode()
def heldout_figures(out: Path, stats: dict) -> dict[str, float]:
    """The held-out figures `train_stats.json` reports, recomputed from the saved pair along another
    path than the script's: each file tokenized on its own, alpha as 1 - the total variation
    (not E[sum_x min(p, q)]), the perplexity from gathered log-probabilities (not cross_entropy)."""
    models = {r: AutoModelForCausalLM.from_pretrained(out / r, dtype=torch.float32).eval() for r in ROLES}
    tok = AutoTokenizer.from_pretrained(out / "target")
    root = Path(stats["corpus"]["stdlib"])
    texts = [
        (root / name).read_text(encoding="utf-8").replace("\r\n", "\n") for name in stats["corpus"]["heldout_files"]
    ]
    stream = [token for text in texts for token in tok(text)["input_ids"]]  # each file after its <|endoftext|>
    seq_len, tokens = stats["seq_len"], stats["metrics"]["eval_tokens"]
    windows = torch.tensor(stream[: tokens // seq_len * (seq_len + 1)]).view(-1, seq_len + 1)
    inputs, labels = windows[:, :-1], windows[:, 1:]
    logp = {r: m(inputs).logits.float().log_softmax(-1) for r, m in models.items()}
    p, q = logp["target"].exp(), logp["draft"].exp()
    return {
        "alpha_t1": (1 - 0.5 * (p - q).abs().sum(-1)).mean().item(),
        **{f"{r}_ppl": math.exp(-lp.gather(-1, labels[..., None]).mean().item()) for r, lp in logp.items()},
        "greedy_agreement": (p.argmax(-1) == q.argmax(-1)).double().mean().item(),
        "eval_tokens": labels.numel(),
    }


@pytest.mark.slow
def test_smoke_training_run(tmp_path):
    """`--smoke` trains, saves and reloads a throwaway pair end to end, and the held-out figures it
    reports are those of the pair it saved."""
    out = tmp_path / "pair"
    cmd = [sys.executable, str(REPO / "jobs" / "train_tiny.py"), "--smoke", "--out", str(out)]
    subprocess.run(cmd, check=True, cwd=REPO, timeout=120, capture_output=True)
    stats = json.loads((out / "train_stats.json").read_text())
    assert stats["metrics"]["eval_tokens"] % stats["seq_len"] == 0  # whole windows
    vocabularies = [AutoTokenizer.from_pretrained(out / role).get_vocab() for role in ROLES]
    assert vocabularies[0] == vocabularies[1] and len(vocabularies[0]) == stats["tokenizer"]["vocab_size"]
    recomputed = heldout_figures(out, stats)
    for name, value in recomputed.items():
        assert stats["metrics"][name] == pytest.approx(value, rel=1e-4), name
