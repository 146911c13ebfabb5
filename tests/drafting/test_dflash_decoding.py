"""DFlash and DFlash2 in the decoding loop, inline: greedy output equals autoregressive decoding
token for token (DDTree best-first and chain, token and block verification of one path drawn from
the marginals; DFlash2's over its selector's tree, best path and walks, and SpecTr over 2 i.i.d.
walks), and at T = 1 the emitted tokens follow the target (chi-square)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from scipy.stats import chisquare

from speculab.core.autoregressive import autoregressive
from speculab.core.engine import Drafter, decode
from speculab.drafting.ddtree import MarginalPathDrafter, TreeDrafter, tree_builder
from speculab.models import DraftModel, LMSpec, TreeTarget
from speculab.registry import get_verifier
from support.engine import PROMPTS, settings
from support.models import DFLASH2, save_random_dflash

LAYER_IDS = (0, 2)
METHODS = ("ddtree", "chain", "token", "block")
# (drafter, method): spectr takes DFlash2's K i.i.d. walks of its chain; block verifies one walk as token does
CASES = [*(("dflash", m) for m in METHODS), *(("dflash2", m) for m in ("ddtree", "chain", "token", "spectr"))]


@pytest.fixture(scope="module")
def pairs(random_llama_pair, tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[TreeTarget, DraftModel]]:
    """Per drafter name, (target, drafter) on the random Llama target."""
    target = random_llama_pair[0]
    root = tmp_path_factory.mktemp("dflash")
    drafts = {
        "dflash": save_random_dflash(root / "d", target, list(LAYER_IDS), seed=3),
        "dflash2": save_random_dflash(root / "d2", target, list(LAYER_IDS), seed=3, dflash2=DFLASH2),
    }
    spec = LMSpec("hf", str(target), feature_layers=LAYER_IDS)
    return {
        name: (TreeTarget(spec), DraftModel(LMSpec("dflash", str(d), target_path=str(target))))
        for name, d in drafts.items()
    }


def drafter_for(method: str, source: DraftModel) -> tuple[Drafter, object]:
    if method in ("ddtree", "chain"):
        return TreeDrafter(source, tree_builder("best_first" if method == "ddtree" else "chain", 16)), get_verifier(
            "ddtree"
        )
    return MarginalPathDrafter(source, torch.Generator()), get_verifier(method)


def paths_of(method: str) -> int:
    return 2 if method == "spectr" else 1


@pytest.mark.parametrize(("drafter", "method"), CASES)
def test_greedy_dflash_equals_autoregressive(pairs, drafter: str, method: str) -> None:
    target, source = pairs[drafter]
    drafter_, verifier = drafter_for(method, source)
    s = settings(K=paths_of(method), L=5, batch=3, max_new=20)  # rows of different lengths leave at different rounds
    run = decode(target, drafter_, verifier, PROMPTS, s)
    assert [p.tokens for p in run.prompts] == [p.tokens for p in autoregressive(target, PROMPTS, s).prompts]
    # every round but each batch's first (2 batches) absorbs the features of the previous round's commit
    assert sum(r.feature_bytes > 0 for r in run.rounds) == len(run.rounds) - 2


def exact_pairs(target_path: Path, prompt: list[int]) -> torch.Tensor:
    """p(x1, x2) [V, V] of the target after `prompt`, at T = 1."""
    from speculab.models.hf import load_causal_lm

    model = load_causal_lm(target_path)
    with torch.inference_mode():
        p1 = torch.softmax(model(input_ids=torch.tensor([prompt])).logits[0, -1].double(), -1)
        V = p1.shape[0]
        seqs = torch.cat([torch.tensor([prompt]).expand(V, -1), torch.arange(V)[:, None]], dim=1)
        p2 = torch.softmax(model(input_ids=seqs).logits[:, -1].double(), -1)  # [V, V]
    return p1[:, None] * p2


def chi_square_pvalue(observed: torch.Tensor, expected: torch.Tensor) -> float:
    """Goodness of fit, cells expected below 5 pooled (the chi-square approximation holds)."""
    expected = expected * observed.sum()
    small = expected < 5
    pooled = [observed[small].sum().reshape(1), expected[small].sum().reshape(1)] if small.any() else [[], []]
    f_obs = torch.cat([observed[~small], torch.as_tensor(pooled[0], dtype=observed.dtype)])
    f_exp = torch.cat([expected[~small], torch.as_tensor(pooled[1], dtype=expected.dtype)])
    return float(chisquare(f_obs.numpy(), f_exp.numpy() * f_obs.sum().item() / f_exp.sum().item()).pvalue)


@pytest.mark.parametrize(("drafter", "method"), [case for case in CASES if case != ("dflash2", "chain")])
def test_emitted_tokens_follow_the_target_at_t1(pairs, random_llama_pair, drafter: str, method: str) -> None:
    """The first and the second emitted token of 1536 decodes (64 identical rows x 24 seeds) against
    the target's exact marginals (the second one is drafted, verified or resampled)."""
    target, source = pairs[drafter]
    drafter_, verifier = drafter_for(method, source)
    prompt = [5, 17, 42, 9]
    tokens, accepted = [], 0
    for seed in range(24):
        s = settings(K=paths_of(method), L=4, T=1.0, batch=64, max_new=2, seed=seed)
        run = decode(target, drafter_, verifier, [prompt] * 64, s)
        tokens += [p.tokens[:2] for p in run.prompts]
        accepted += sum(sum(r.accepted) for r in run.rounds)
    assert accepted >= 10  # drafted tokens were accepted, not only resampled (chain: argmax drafts, ~30)
    joint = exact_pairs(random_llama_pair[0], prompt)  # [V, V]
    drawn = torch.tensor(tokens)  # [n, 2]
    for position, marginal in enumerate((joint.sum(1), joint.sum(0))):
        observed = torch.bincount(drawn[:, position], minlength=len(marginal)).double()
        pvalue = chi_square_pvalue(observed, marginal)
        assert pvalue > 1e-4, f"{method}, token {position + 1}: chi-square p-value {pvalue:.3g}"
