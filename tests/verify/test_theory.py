"""The GBV paper's LPs solved with HiGHS on tiny instances (Thm 3.3, 3.4, 4.3, App. B).

Node budgets D(a) for every prefix a of 1..L tokens (D = 1 at the root, 0 below depth L);
the objective sum_a D(a) p(a) plus the root's 1 is the block efficiency E[tau + 1].
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy.optimize import linprog

from speculab.registry import ALGORITHMS, PATH_ALGORITHMS, get_reference
from speculab.verify.exact import ToyModel, expected_accepted, round_outcomes, sequence_probability
from support.toy_instances import Instance, instance_pair

Prefix = tuple[int, ...]


def prefixes(vocab: int, length: int) -> list[Prefix]:
    """Every prefix a_{1:i}, 1 <= i <= L (the LP's variables), shortest first."""
    return [a for i in range(1, length + 1) for a in itertools.product(range(vocab), repeat=i)]


def antichains_below(node: Prefix, vocab: int, length: int) -> list[list[Prefix]]:
    """Antichains (Def. 4.2) of the strict descendants of ``node``, the empty one included."""
    if len(node) == length:
        return [[]]
    options = [[[child]] + antichains_below(child, vocab, length) for child in (node + (x,) for x in range(vocab))]
    return [list(itertools.chain.from_iterable(choice)) for choice in itertools.product(*options)]


def block_efficiency_lp(target: ToyModel, draft: ToyModel, length: int, paths: int | None) -> float:
    """Optimum of the single-path LP (Thm 3.3, eq. 7-9) for ``paths=None``, else of the K-path LP
    (Thm 4.3, eq. 10-12) with its antichain constraints."""
    nodes = prefixes(target.vocab, length)
    column = {a: j for j, a in enumerate(nodes)}
    p = np.array([sequence_probability(target, (), a) for a in nodes])
    q = np.array([sequence_probability(draft, (), a) for a in nodes])
    rows, bounds = [], []
    for a in nodes:  # eq. 8 / 11: D(a) <= D(parent), D(a_{1:1}) <= 1
        row = np.zeros(len(nodes))
        row[column[a]] = 1
        if len(a) > 1:
            row[column[a[:-1]]] = -1
        rows.append(row)
        bounds.append(0.0 if len(a) > 1 else 1.0)
    if paths is None:  # eq. 9: D(a) p(a) <= q(a)
        rows += list(np.diag(p))
        bounds += list(q)
    else:  # eq. 12 over every non-empty antichain T
        for chain in antichains_below((), target.vocab, length)[1:]:
            index = [column[a] for a in chain]
            row = np.zeros(len(nodes))
            row[index] = p[index]
            rows.append(row)
            bounds.append(1 - (1 - q[index].sum()) ** paths)
    result = linprog(-p, A_ub=np.array(rows), b_ub=np.array(bounds), bounds=(0, None), method="highs")
    assert result.status == 0, result.message
    return 1 - result.fun


def block_efficiency(name: str, target: ToyModel, draft: ToyModel, length: int, paths: int) -> float:
    """Exact E[tau + 1] of one round of a registered verifier, by enumeration."""
    return 1 + expected_accepted(round_outcomes(get_reference(name), target, draft, paths, length))


SINGLE_PATH: list[Instance] = [
    (2, 2, 1, "full", False, False),
    (3, 2, 1, "full", True, False),
    (2, 3, 1, "bigram", False, False),
    (3, 3, 1, "full", False, False),
]
MULTI_PATH: list[Instance] = [
    (2, 2, 2, "full", False, False),
    (3, 2, 2, "bigram", False, False),
    (2, 2, 3, "full", False, False),
]
# greedy block verification and SpecTr-GBV are valid only with their carry (BV App. C), not per round (Def. 3.1)
ROUND_VALID = [name for name in PATH_ALGORITHMS if not ALGORITHMS[name].carry]


@pytest.mark.parametrize("instance", SINGLE_PATH)
def test_single_path_lp_optimum_is_block_verification(instance: Instance) -> None:
    """Thm 3.3-3.4: the LP optimum equals block verification's exact block efficiency."""
    target, draft = instance_pair(instance, seed=91)
    length = instance[1]
    optimum = block_efficiency_lp(target, draft, length, None)
    assert optimum == pytest.approx(block_efficiency("block", target, draft, length, 1), abs=1e-9)


@pytest.mark.parametrize("instance", SINGLE_PATH[:3])
def test_multi_path_lp_with_one_path_is_the_single_path_lp(instance: Instance) -> None:
    """App. B: for K = 1 the antichain constraints (eq. 12) reduce to the pointwise ones (eq. 9)."""
    target, draft = instance_pair(instance, seed=91)
    length = instance[1]
    assert block_efficiency_lp(target, draft, length, 1) == pytest.approx(
        block_efficiency_lp(target, draft, length, None), abs=1e-9
    )


@pytest.mark.parametrize("instance", MULTI_PATH)
def test_multi_path_lp_bounds_every_verifier(instance: Instance) -> None:
    """Thm 4.3: no valid K-path verifier's block efficiency exceeds the LP optimum."""
    target, draft = instance_pair(instance, seed=93)
    length, paths = instance[1:3]
    optimum = block_efficiency_lp(target, draft, length, paths)
    efficiency = {name: block_efficiency(name, target, draft, length, paths) for name in ROUND_VALID}
    assert all(value <= optimum + 1e-9 for value in efficiency.values()), (optimum, efficiency)
    assert efficiency["gbv"] >= efficiency["block"] - 1e-12


def test_greedy_block_exceeds_the_per_round_lp() -> None:
    """BV Section 2 example: greedy block's 1 + 12/9 beats the per-round optimum 1 + 11/9, which
    is why it needs the carry."""
    target = ToyModel(2, 0, "free", table=(1 / 3, 2 / 3))
    draft = ToyModel(2, 0, "free", table=(2 / 3, 1 / 3))
    assert block_efficiency_lp(target, draft, 2, None) == pytest.approx(1 + 11 / 9, abs=1e-9)
    assert block_efficiency("greedy_block", target, draft, 2, 1) == pytest.approx(1 + 12 / 9, abs=1e-12)
