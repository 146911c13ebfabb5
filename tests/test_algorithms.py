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

from speculab.config import PROJECT_ROOT
from speculab.registry import ALGORITHMS, DRAFTERS, PATH_ALGORITHMS, get_reference, get_verifier, registry_markdown
from support.toy_instances import assert_greedy_matching, decoded_joint_pvalue, sample_batch, toy_pair


@pytest.mark.parametrize("name", PATH_ALGORITHMS)
def test_temperature_zero_is_greedy_matching(name: str) -> None:
    target, draft = toy_pair(6, "full", False, True, seed=2)
    paths, p, q = sample_batch(target, draft, batch=32, paths=2, length=4, seed=4)
    assert_greedy_matching(get_verifier(name)(paths, p, q, rng=torch.Generator().manual_seed(0)), paths, p)


@pytest.mark.slow
@pytest.mark.parametrize("name", PATH_ALGORITHMS)
def test_decoded_joint_matches_target_chi_square(name: str) -> None:
    pvalue, cells = decoded_joint_pvalue(name, device="cpu")
    assert pvalue > 1e-4, f"{name}: chi-square p-value {pvalue:.3g} over {cells} cells"


# ---------------------------------------------------------------- the registry itself


def test_every_algorithm_accepts_registered_drafters_of_its_kind() -> None:
    """Tree builders take marginals; path algorithms take paths, the single-path ones (K = 1) also one
    path drawn from marginals, and those without a carry walks of a selector's chain (DFlash2)."""
    for spec in ALGORITHMS.values():
        assert spec.drafters and set(spec.drafters) <= set(DRAFTERS)
        kinds = {DRAFTERS[d].proposes for d in spec.drafters}
        selectors = {d for d in spec.drafters if DRAFTERS[d].selector}
        if spec.tree_builder:
            assert kinds == {"marginals"}, spec.name
        elif spec.carry:
            assert kinds == {"paths"} and not selectors, spec.name
        else:
            assert kinds == {"paths", "marginals"} and selectors == {"dflash2"}, spec.name


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
    """docs/algorithms.md holds `python -m speculab.registry` verbatim between its markers."""
    text = (PROJECT_ROOT / "docs" / "algorithms.md").read_text()
    start, end = "<!-- registry-table:start -->\n", "\n<!-- registry-table:end -->"
    assert text[text.index(start) + len(start) : text.index(end)] == registry_markdown()


def test_every_drafter_names_a_loader_of_the_model_roles() -> None:
    """A drafter with a checkpoint of its own (`DrafterSpec.backend`) names a loader of
    `models.roles.BACKENDS`, which a model pair may not name (`PAIR_BACKENDS`)."""
    from speculab.models.roles import BACKENDS, PAIR_BACKENDS

    own = {spec.backend for spec in DRAFTERS.values() if spec.backend}
    assert own and own <= set(BACKENDS) - set(PAIR_BACKENDS)
