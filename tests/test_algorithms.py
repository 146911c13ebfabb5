"""The algorithm registry, and every registered batched verifier: temperature 0, and a
distribution test over rounds.

The distribution test decodes N tokens with a bigram toy pair in one batch of 200,000 rows
(drafts sampled by torch, the carry passed between rounds) and compares the empirical joint of
the first N tokens with the target's exact joint by a chi-square test.
"""

from __future__ import annotations

import re

import pytest
import torch
from scipy.stats import chisquare

from speculab.algorithms import ALGORITHMS, DRAFTERS, PATH_ALGORITHMS, get_reference, get_verifier, registry_markdown
from speculab.config import PROJECT_ROOT
from speculab.verify.decisions import sample_inverse_cdf
from speculab.verify.exact import ToyModel, target_distribution
from speculab.verify.verdict import Verdict
from support.toy_instances import assert_greedy_matching, sample_batch, toy_pair


@pytest.mark.parametrize("name", PATH_ALGORITHMS)
def test_temperature_zero_is_greedy_matching(name: str) -> None:
    target, draft = toy_pair(6, "full", False, True, seed=2)
    paths, p, q = sample_batch(target, draft, batch=32, paths=2, length=4, seed=4)
    assert_greedy_matching(get_verifier(name)(paths, p, q, rng=torch.Generator().manual_seed(0)), paths, p)


def bigram_table(model: ToyModel) -> torch.Tensor:
    """``[V+1, V]`` next-token rows after each token, the last row for the empty context."""
    rows = [model((x,)) for x in range(model.vocab)] + [model(())]
    return torch.stack(rows)


@torch.no_grad()
def decode_tokens(
    name: str, target: ToyModel, draft: ToyModel, batch: int, paths: int, length: int, tokens: int, seed: int
) -> torch.Tensor:
    """``[B, tokens]`` the first tokens of speculative decoding, every row from the empty context."""
    p_table, q_table = bigram_table(target), bigram_table(draft)
    gen = torch.Generator().manual_seed(seed)
    out = torch.zeros(batch, tokens * (length + 1) + 1, dtype=torch.int64)  # last column: discard
    count = torch.zeros(batch, dtype=torch.int64)
    carry = None
    rows = torch.arange(batch)
    for _ in range(tokens):  # every round emits at least one token
        last = torch.where(count > 0, out[rows, (count - 1).clamp_min(0)], target.vocab)
        prev = last[:, None].expand(batch, paths)
        drafted = []
        for _ in range(length):
            u = torch.rand(batch * paths, generator=gen, dtype=torch.float64)
            prev = sample_inverse_cdf(q_table[prev].flatten(0, 1), u).view(batch, paths)
            drafted.append(prev)
        draft_paths = torch.stack(drafted, dim=2)
        context = torch.cat([last[:, None, None].expand(batch, paths, 1), draft_paths], dim=2)
        verdict: Verdict = get_verifier(name)(
            draft_paths, p_table[context], q_table[context[:, :, :-1]], rng=gen, carry=carry
        )
        column = count[:, None] + torch.arange(length + 1)
        keep = torch.arange(length + 1) < verdict.num_tokens[:, None]
        out.scatter_(1, torch.where(keep, column, out.shape[1] - 1), torch.where(keep, verdict.tokens, 0))
        count += verdict.num_tokens
        carry = verdict.carry
    return out[:, :tokens]


@pytest.mark.slow
@pytest.mark.parametrize("name", PATH_ALGORITHMS)
def test_decoded_joint_matches_target_chi_square(name: str) -> None:
    vocab, length, tokens, batch = 3, 3, 4, 200_000
    spec = ALGORITHMS[name]
    paths = 2 if spec.multi_path and spec.lossless(2) else 1  # spectr_gbv: its lossless K = 1
    target, draft = ToyModel(vocab, 101, "bigram"), ToyModel(vocab, 102, "bigram")
    decoded = decode_tokens(name, target, draft, batch, paths, length, tokens, seed=7)
    code = (decoded * vocab ** torch.arange(tokens - 1, -1, -1)).sum(1)
    observed = torch.bincount(code, minlength=vocab**tokens).double()
    exact = target_distribution(target, tokens)
    expected = (
        torch.tensor(
            [
                exact.get(tuple(int(c) // vocab ** (tokens - 1 - i) % vocab for i in range(tokens)), 0.0)
                for c in range(vocab**tokens)
            ],
            dtype=torch.float64,
        )
        * batch
    )
    small = expected < 5  # pool sparse cells so the chi-square approximation holds
    f_obs = torch.cat([observed[~small], observed[small].sum().reshape(1)])
    f_exp = torch.cat([expected[~small], expected[small].sum().reshape(1)])
    pvalue = chisquare(f_obs.numpy(), f_exp.numpy() * f_obs.sum().item() / f_exp.sum().item()).pvalue
    assert pvalue > 1e-4, f"{name}: chi-square p-value {pvalue:.3g} over {len(f_obs)} cells"


# ---------------------------------------------------------------- the registry itself


def test_every_algorithm_accepts_registered_drafters_of_its_kind() -> None:
    """Tree builders take marginals; path algorithms take paths, and the single-path ones (K = 1)
    also one path drawn from marginals."""
    for spec in ALGORITHMS.values():
        assert spec.drafters and set(spec.drafters) <= set(DRAFTERS)
        kinds = {DRAFTERS[d].proposes for d in spec.drafters}
        if spec.tree_builder:
            assert kinds == {"marginals"}, spec.name
        else:
            assert kinds == ({"paths"} if spec.multi_path or spec.carry else {"paths", "marginals"}), spec.name


def test_every_algorithm_has_a_reference_and_a_checked_verifier() -> None:
    for name, spec in ALGORITHMS.items():
        assert callable(spec.reference) and callable(get_verifier(name))
        for rule in spec.node_rules:
            assert callable(get_verifier(name, rule)) and callable(get_reference(name, rule))


@pytest.mark.parametrize(
    ("name", "rule", "message"),
    [
        ("nope", "kseq", "algorithm.name='nope': must be one of token, block"),
        ("block", "lp", "algorithm.node_rule='lp': only algorithm=spectr takes a node rule"),
        ("spectr", "nope", "algorithm.node_rule='nope': must be one of kseq, specinfer, nss, lp"),
    ],
)
def test_unknown_names_are_refused_with_the_choices(name: str, rule: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        get_verifier(name, rule)


def test_docs_table_is_the_registry() -> None:
    """docs/algorithms.md holds `python -m speculab.algorithms` verbatim between its markers."""
    text = (PROJECT_ROOT / "docs" / "algorithms.md").read_text()
    start, end = "<!-- registry-table:start -->\n", "\n<!-- registry-table:end -->"
    assert text[text.index(start) + len(start) : text.index(end)] == registry_markdown()
