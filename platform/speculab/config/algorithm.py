"""Checks of the algorithm and drafter against the registry (`speculab.algorithms`): K, losslessness,
node rules (and the size of an optimal-transport rule's problem), the paired comparison, the tree
keys, and the drafter an algorithm takes; and `largest_tree`, the most nodes a round drafts."""

from __future__ import annotations

import math

from speculab.algorithms import (
    ALGORITHMS,
    DRAFTERS,
    OT_RULES,
    PATH_ALGORITHMS,
    drafter_name_error,
    get_algorithm,
    node_rule_error,
)
from speculab.config.checkpoints import Checkpoint
from speculab.config.errors import choice, within
from speculab.config.schema import BUDGET_RANGE, REPEATS_RANGE, AlgorithmConfig, Config
from speculab.drafting.ddtree import TREES

# Draft columns an optimal-transport node rule may solve over per node. Measured on this project's
# CPU (RESULTS.md, "Optimal-transport node rules"): the LP takes about 0.05 ms per column (230 ms at
# top-k 100, K = 2: 5,051 columns), so this cap is seconds per node; top-k 100 fits up to K = 3
# (166,751), the tiny pair's whole vocabulary at K = 2 (8.4 million) does not.
OT_MAX_COLUMNS = 200_000


def largest_tree(cfg: Config) -> int:
    """The most nodes a round's draft tree has, root included: a tree algorithm's budget, else K paths
    of L tokens under one root (`cfg` resolved: algorithm.L set). It sizes the KV caches (and the
    memory plan) up front."""
    a = cfg.algorithm
    assert a.L is not None  # resolved by `with_draft_length`
    return a.budget + 1 if ALGORITHMS[a.name].tree_builder else a.K * a.L + 1


def algorithm_errors(cfg: Config, found: dict[str, Checkpoint]) -> list[str]:
    """Algorithm, K, node rule, drafter and tree settings against the registry."""
    algorithm, drafter = cfg.algorithm, cfg.drafter
    errors = [error] if (error := drafter_name_error(drafter.name)) is not None else []
    try:
        spec = get_algorithm(algorithm.name)
    except ValueError as err:
        return [*errors, str(err)]
    if algorithm.K > 1 and not spec.multi_path:
        multi = ", ".join(name for name, s in ALGORITHMS.items() if s.multi_path)
        errors.append(
            f"algorithm.K={algorithm.K}: algorithm={algorithm.name} verifies one path (K=1); K > 1 needs a "
            f"multi-path algorithm: {multi}"
        )
    if not spec.lossless(algorithm.K) and not algorithm.allow_lossy:
        errors.append(
            f"algorithm.K={algorithm.K}: algorithm={algorithm.name} is lossless only for K <= {spec.lossless_paths} "
            "(its output is not distributed as the target's, docs/algorithms.md); set algorithm.allow_lossy=true "
            "to run it anyway"
        )
    if (rule_error := node_rule_error(spec, algorithm.node_rule)) is not None:
        errors.append(rule_error)
    elif algorithm.node_rule in OT_RULES and "target" in found:
        errors += _transport_size_errors(algorithm, cfg.sampling.top_k, found["target"])
    if algorithm.compare:
        errors += _compare_errors(algorithm)
    return errors + _drafter_errors(cfg) + _tree_errors(algorithm)


def _drafter_errors(cfg: Config) -> list[str]:
    """A drafter the algorithm takes, and `drafter.path` only for a drafter that reads one."""
    algorithm, drafter = cfg.algorithm, cfg.drafter
    errors = []
    if drafter.path is not None and drafter.name in DRAFTERS and DRAFTERS[drafter.name].weights == "model.draft":
        readers = ", ".join(name for name, d in DRAFTERS.items() if d.weights != "model.draft")
        errors.append(
            f"drafter.path={drafter.path!r}: drafter={drafter.name} drafts with the pair's draft model "
            f"(model.draft_path / model.draft_id) and reads no path; only drafter={readers} do"
        )
    spec = ALGORITHMS[algorithm.name]
    if drafter.name in DRAFTERS and drafter.name not in spec.drafters:
        errors.append(
            f"drafter.name={drafter.name!r}: algorithm={algorithm.name} needs drafter one of {', '.join(spec.drafters)}"
        )
    return errors


def _tree_errors(algorithm: AlgorithmConfig) -> list[str]:
    """A tree algorithm's budget and builder; `algorithm.tree` and `algorithm.budget` away from their
    defaults for an algorithm that builds no tree."""
    errors: list[str] = []
    if ALGORITHMS[algorithm.name].tree_builder:
        low, high = BUDGET_RANGE
        if not low <= algorithm.budget <= high:
            errors.append(f"algorithm.budget={algorithm.budget}: must be an integer in {low}..{high}")
        choice(errors, "algorithm.tree", algorithm.tree, TREES)
        return errors
    builders = "/".join(name for name, s in ALGORITHMS.items() if s.tree_builder)
    default = AlgorithmConfig()
    return [
        f"algorithm.{key}={value!r}: only algorithm={builders} builds a tree; "
        f"algorithm={algorithm.name} takes none (leave it at {getattr(default, key)!r})"
        for key in ("tree", "budget")
        if (value := getattr(algorithm, key)) != getattr(default, key)
    ]


def transport_columns(support: int, K: int) -> int:
    """Draft columns of the grouped OT problem at one node: the subsets of at most K of the
    ``support`` draft tokens (Global Resolution paper, App. K)."""
    return sum(math.comb(support, j) for j in range(K + 1))


def _transport_size_errors(algorithm: AlgorithmConfig, top_k: int, target: Checkpoint) -> list[str]:
    """An OT node rule whose problem per node would not fit: refused with its size and the top-k that fits."""
    vocab = target.config.get("vocab_size")
    support = top_k if top_k > 0 else vocab
    if not isinstance(support, int) or (columns := transport_columns(support, algorithm.K)) <= OT_MAX_COLUMNS:
        return []
    fits = max(k for k in range(1, support + 1) if transport_columns(k, algorithm.K) <= OT_MAX_COLUMNS)
    where = f"sampling.top_k={top_k}" if top_k > 0 else f"sampling.top_k=0 (the whole vocabulary, {vocab} tokens)"
    return [
        f"algorithm.node_rule={algorithm.node_rule}: with {where} at algorithm.K={algorithm.K} each node's "
        f"optimal-transport problem has {columns:,} draft columns (at most {OT_MAX_COLUMNS:,} run in reasonable "
        f"time and memory); set sampling.top_k <= {fits} (+experiment=global_resolution_table4 uses 10)"
    ]


def _compare_errors(algorithm: AlgorithmConfig) -> list[str]:
    """`algorithm.compare`: path verifiers, beside a path algorithm, lossless at K unless allowed."""
    errors: list[str] = []
    if ALGORITHMS[algorithm.name].tree_builder:
        return [
            f"algorithm.compare: algorithm={algorithm.name} drafts a tree; compare needs i.i.d. paths (path algorithms)"
        ]
    for name in algorithm.compare:
        if name not in PATH_ALGORITHMS:
            errors.append(
                f"algorithm.compare: {name!r} is not a path verifier; must be among {', '.join(PATH_ALGORITHMS)}"
            )
        elif not ALGORITHMS[name].lossless(algorithm.K) and not algorithm.allow_lossy:
            errors.append(
                f"algorithm.compare: {name} is not lossless at K={algorithm.K}; "
                "set algorithm.allow_lossy=true to compare it"
            )
    within(errors, "algorithm.compare_repeats", algorithm.compare_repeats, REPEATS_RANGE)
    return errors
