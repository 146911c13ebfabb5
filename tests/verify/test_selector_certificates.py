"""Issue 74's certificates on DFlash2's draft law: every path verifier that takes drafter=dflash2 is
lossless when its paths are walks of a candidate selector's chain (K of V tokens a depth, each drawn
given the one before it), by exact enumeration of every draft and every decision (V = 3, 2 candidates
a depth); at T = 0 the draft is the selector's best path. greedy_block and spectr_gbv are refused: the
enumeration shows them lossy on it (their carry assumes a draft whose law does not depend on the
round). The DDTree walk over the selector's tree is lossless at T > 0 and T = 0, and the tempting rule,
min(1, p/q) over the tree's children with q the selector's conditionals, is not."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from speculab.drafting.selector import SelectorLaw, selector_paths, selector_tree, walk
from speculab.registry import ALGORITHMS
from speculab.verify.ddtree_walk import ddtree_walk_reference
from speculab.verify.decisions import Decisions
from speculab.verify.exact import (
    SelectorToy,
    ToyModel,
    decode_distribution,
    enumerate_outcomes,
    max_difference,
    target_distribution,
)

V, CANDIDATES = 3, 2
SERVED = [name for name, spec in ALGORITHMS.items() if "dflash2" in spec.drafters and not spec.tree_builder]


def _cases() -> list[tuple[str, int]]:
    cases = []
    for name in SERVED:
        spec = ALGORITHMS[name]
        for paths in (1, 2) if spec.multi_path else (1,):
            if spec.lossless(paths):
                cases.append((name, paths))
    return cases


REFUSED = [name for name, spec in ALGORITHMS.items() if "dflash2" not in spec.drafters and not spec.tree_builder]


def test_which_path_verifiers_take_dflash2() -> None:
    assert {"token", "block", "spectr", "specinfer", "nss", "traversal", "gbv"} <= set(SERVED)
    assert set(REFUSED) == {"greedy_block", "spectr_gbv"}


@pytest.mark.parametrize("name", REFUSED)
def test_the_refused_verifiers_are_lossy_on_selector_drafts(name: str) -> None:
    """Their carry (the next round's modified target) assumes a draft whose law at a prefix does not
    depend on the round that drafts it; a block drafter's does, and the enumeration shows the bias."""
    target, draft = ToyModel(V, 31, "bigram"), SelectorToy(V, 32, CANDIDATES)
    exact = decode_distribution(ALGORITHMS[name].reference, target, draft, 1, 2, 3)
    assert max_difference(exact, target_distribution(target, 3)) > 1e-3


@pytest.mark.parametrize(("name", "paths"), _cases())
@pytest.mark.parametrize("greedy", [False, True])
def test_decoding_with_selector_drafts_follows_the_target(name: str, paths: int, greedy: bool) -> None:
    """Three rounds' worth of tokens (L = 2), carries included: the target's exact law."""
    target = ToyModel(V, 31, "bigram", one_hot=greedy)
    draft = SelectorToy(V, 32, CANDIDATES, one_hot=greedy)
    exact = decode_distribution(ALGORITHMS[name].reference, target, draft, paths, 2, 3)
    assert max_difference(exact, target_distribution(target, 3)) < 1e-9


def toy_law(seed: int, length: int = 3, k: int = CANDIDATES, vocab: int = V) -> SelectorLaw:
    """One row's law: k candidates a depth and random conditionals given the candidate before."""
    gen = torch.Generator().manual_seed(seed)
    candidates = torch.stack([torch.randperm(vocab, generator=gen)[:k] for _ in range(length)])[None]
    scores = torch.randn(1, length, k, k, generator=gen) * 2
    scores[:, 0] = scores[:, 0, :1]  # at depth 0 every row is the root's
    return SelectorLaw(candidates, torch.softmax(scores, dim=-1), vocab)


def test_a_walk_draws_each_token_from_the_conditional_it_reports() -> None:
    law = toy_law(3, length=4, k=3, vocab=5)
    u = torch.rand(1, 6, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    indices, rows = walk(law, u)
    paths, q = selector_paths(law, u)
    for p in range(6):
        previous = 0
        for d in range(4):
            row = law.conditionals[0, d, previous]
            assert torch.equal(rows[0, p, d], row)
            c = int(indices[0, p, d])
            assert row[:c].sum() < 1 - u[0, p, d] <= row[: c + 1].sum() + 1e-7  # inverse CDF on 1 - u
            assert int(paths[0, p, d]) == int(law.candidates[0, d, c])
            assert float(q[0, p, d, paths[0, p, d]]) == pytest.approx(float(row[c]))
            assert float(q[0, p, d].sum()) == pytest.approx(1.0)
            previous = c


def test_the_tree_holds_the_most_probable_prefixes_under_the_chain() -> None:
    """Budget B: the B prefixes of highest product of conditionals (not of per-depth marginals)."""
    law = toy_law(5, length=3, k=3, vocab=6)
    logq = law.conditionals[0].double().log()
    ids = law.candidates[0]
    scores = {}
    for depth in range(1, 4):
        for path in itertools.product(range(3), repeat=depth):
            scores[path] = sum(float(logq[d, path[d - 1] if d else 0, c]) for d, c in enumerate(path))
    for budget in (1, 4, 9, 20):
        tree = selector_tree(law, torch.tensor([0]), budget)
        got = set()
        for node in range(1, int(tree.num_nodes[0])):
            path, k = [], node
            while k > 0:
                path.append(int(tree.tokens[0, k]))
                k = int(tree.parents[0, k])
            got.add(tuple(reversed(path)))
        best = sorted(scores, key=lambda p: -scores[p])[:budget]
        assert got == {tuple(int(ids[d, c]) for d, c in enumerate(path)) for path in best}


def _walk_law(tree, p: torch.Tensor, rule) -> dict[tuple[int, ...], float]:
    """The exact law of what `rule` emits over `tree` (scalar reference, every decision)."""
    outcomes = enumerate_outcomes(lambda d: rule(tree.tokens[0], tree.children(0), p, d))
    law: dict[tuple[int, ...], float] = {}
    for (nodes, extra), prob in outcomes:
        emitted = tuple(int(tree.tokens[0, k]) for k in nodes[1:]) + (extra,)
        law[emitted] = law.get(emitted, 0.0) + prob
    return law


def _first_tokens(law: dict[tuple[int, ...], float], table: torch.Tensor, root: int, n: int) -> dict:
    """The law of the first n tokens: each emitted sequence continued by the bigram target."""
    joint: dict[tuple[int, ...], float] = {}
    for x in itertools.product(range(table.shape[0]), repeat=n):
        total = 0.0
        for emitted, prob in law.items():
            if x[: len(emitted)] == emitted[:n]:
                rest = x[len(emitted) :]
                last = emitted[-1] if emitted else root
                total += prob * math.prod(float(table[a, b]) for a, b in zip((last, *rest), rest))
        joint[x] = total
    return joint


def tempting_rule(q_of_node):
    """min(1, p/q) over a deterministic tree's children in order, q the selector's conditional at the
    node, the residual max(p - q, 0) after each rejection (SpecInfer's rule, as if the children were
    drawn from q): what one might run on a top-k tree."""

    def rule(tokens: torch.Tensor, children: list[list[int]], p: torch.Tensor, d: Decisions):
        nodes = [0]
        while True:
            node = nodes[-1]
            residual, q = p[node].clone(), q_of_node(node)
            accepted = None
            for child in children[node]:
                x = int(tokens[child])
                if d.bernoulli(min(1.0, float(residual[x]) / max(float(q[x]), 1e-30))):
                    accepted = child
                    break
                residual = (residual - q).clamp(min=0)
                if float(residual.sum()) <= 0:
                    break
                residual = residual / residual.sum()
            if accepted is None:
                return nodes, d.categorical(residual)
            nodes.append(accepted)

    return rule


@pytest.mark.parametrize("temperature", [1.0, 0.0])
def test_the_walk_over_the_selector_tree_is_lossless_and_the_tempting_rule_is_not(temperature: float) -> None:
    gen = torch.Generator().manual_seed(9)
    table = torch.softmax(torch.randn(V, V, generator=gen, dtype=torch.float64) * 2, dim=-1)
    if temperature == 0:
        table = torch.nn.functional.one_hot(table.argmax(-1), V).double()
    law = toy_law(11, length=2)
    root = 1
    tree = selector_tree(law, torch.tensor([root]), 4)
    p = table[tree.tokens[0]]  # [N, V] the bigram target at every node
    want = _first_tokens({(): 1.0}, table, root, 3)  # nothing emitted: the target's own law
    walked = _first_tokens(_walk_law(tree, p, ddtree_walk_reference), table, root, 3)
    assert max(abs(walked[x] - want[x]) for x in want) < 1e-12

    def q_of_node(node: int) -> torch.Tensor:  # the selector's conditional over the node's children
        depth = int(tree.depth[0, node])
        out = torch.zeros(V, dtype=torch.float64)
        if depth >= law.candidates.shape[1]:
            return out
        ids = law.candidates[0, depth]
        before = 0 if depth == 0 else int((law.candidates[0, depth - 1] == tree.tokens[0, node]).nonzero()[0, 0])
        return out.index_put_((ids,), law.conditionals[0, depth, before].double())

    if temperature > 0:  # at T = 0 the target's argmax decides either way
        tempted = _first_tokens(_walk_law(tree, p, tempting_rule(q_of_node)), table, root, 3)
        assert max(abs(tempted[x] - want[x]) for x in want) > 1e-3
