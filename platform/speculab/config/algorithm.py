"""`algorithm.*` and `drafter.*`: the verification algorithm and the drafter that proposes to it, with
their checks against the registry (`speculab.registry`): K and L, losslessness, node rules (and the
size of an optimal-transport rule's problem), the paired comparison, the tree keys, and the drafter an
algorithm takes; and `largest_tree`, the most nodes a round drafts. The registry imports torch, so the
checks import it when they run: the dataclasses load with `speculab --help`, which needs none of it."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Protocol

from speculab.config.checkpoints import Checkpoint
from speculab.config.errors import choice, within
from speculab.config.sampling import SamplingConfig

K_RANGE = (1, 64)  # algorithm.K: i.i.d. draft paths
L_RANGE = (1, 128)  # algorithm.L: draft length
DEFAULT_L = 8  # algorithm.L where neither the algorithm preset nor the drafter's block sets it
# algorithm.L, algorithm.budget: each round's length in 0..AUTO_LONGEST (`core.adaptive`), or its tree's budget in
# BUDGETS (`core.adaptive_budget`), chosen by an adaptive policy
AUTO = "auto"
AUTO_LONGEST = DEFAULT_L
BUDGET_RANGE = (16, 1024)  # algorithm.budget: DDTree node budget
# algorithm.budget=auto: the budgets a round's tree is chosen from (`core.adaptive_budget`)
BUDGETS = (16, 32, 64, 128, 256, 512, 1024)
AHEAD_MODES = ("off", "ssd")  # drafter.ahead
AHEAD_BUDGET_RANGE = (1, 256)  # drafter.ahead_budget
REPEATS_RANGE = (1, 1024)  # algorithm.compare_repeats

# Draft columns an optimal-transport node rule may solve over per node. Measured on this project's
# CPU (RESULTS.md, "Optimal-transport node rules"): the LP takes about 0.05 ms per column (230 ms at
# top-k 100, K = 2: 5,051 columns), so this cap is seconds per node; top-k 100 fits up to K = 3
# (166,751), the tiny pair's whole vocabulary at K = 2 (8.4 million) does not.
OT_MAX_COLUMNS = 200_000


@dataclass
class AlgorithmConfig:
    name: str = "block"
    K: int = 1  # i.i.d. draft paths per round
    # draft length; null: the drafter's block (DFlash: block_size - 1; parallel: block_size), else 8; auto: chosen
    # each round (0..8, `core.adaptive`)
    L: Any = 4
    node_rule: str = "kseq"  # spectr only: per-node rule of the top-down walk
    budget: Any = 64  # ddtree only: node budget B (16..1024), or auto: chosen each round from 16, 32, .., 1024
    tree: str = "best_first"  # ddtree only: best_first (DDTree) or chain (argmax per depth, one path)
    # 0: off; in (0, 1): a round stops drafting after a token whose draft probability is below this in every
    # row (the draft's confidence; `drafting.iid.sample_iid_paths`)
    confidence_stop: float = 0.0
    allow_lossy: bool = False  # run an algorithm at a K its exact certificates do not cover (spectr_gbv, K >= 2)
    compare: list[str] = field(default_factory=list)  # path verifiers also run on every round's drafts (paired)
    compare_repeats: int = 8  # verifications per compared verifier and round (batched)


@dataclass
class DrafterConfig:
    name: str = (
        "iid"  # iid: K sampled paths; ar_marginals, parallel, dflash: per-depth marginals (ddtree, token, block)
    )
    path: str | None = None  # parallel, dflash: the drafter's own checkpoint dir (dflash, null: the model's draft)
    # drafting ahead (`speculab.drafting.ahead`): off, or ssd (the next round drafted while the target verifies)
    ahead: str = "off"
    ahead_budget: int = 8  # ssd: guesses of a round's verdict drafted ahead, per row
    ahead_fan_out: str = "geometric"  # ssd: how the guesses spread over accepted lengths (`drafting.ahead.FAN_OUTS`)


class DraftView(Protocol):
    """The parts of a config the algorithm's checks read (`Config` is one; a shape, not the class,
    because `Config` is built from these dataclasses)."""

    algorithm: AlgorithmConfig
    drafter: DrafterConfig
    sampling: SamplingConfig


def draft_length(a: AlgorithmConfig) -> int:
    """The most tokens a round drafts on a path: algorithm.L, or for auto the longest the policy may choose
    (algorithm.L set: `config.checks.with_draft_length`)."""
    assert a.L is not None  # set by `config.checks.with_draft_length`
    return AUTO_LONGEST if a.L == AUTO else a.L


def tree_budget(a: AlgorithmConfig) -> int:
    """The most nodes below the root a tree round builds: algorithm.budget, or for auto the largest the
    policy may choose."""
    return BUDGETS[-1] if a.budget == AUTO else a.budget


def largest_tree(a: AlgorithmConfig) -> int:
    """The most nodes a round's draft tree has, root included: a tree algorithm's budget, else K paths
    of L tokens under one root (algorithm.L set). It sizes the KV caches (and the memory footprint) up front."""
    from speculab.registry import ALGORITHMS

    return tree_budget(a) + 1 if ALGORITHMS[a.name].tree_builder else a.K * draft_length(a) + 1


def length_error(L: Any) -> str | None:
    """Why `algorithm.L` is neither an integer in L_RANGE, nor auto, nor null (None: it is one of them). The
    field takes any value, so its type is checked here, before anything reads it as a number."""
    low, high = L_RANGE
    if L is None or L == AUTO or (not isinstance(L, bool) and isinstance(L, int) and low <= L <= high):
        return None
    return f"algorithm.L={L}: must be an integer >= {low} and <= {high}, or auto (chosen each round)"


def budget_error(budget: Any, range_too: bool = False) -> str | None:
    """Why `algorithm.budget` is neither an integer (in BUDGET_RANGE, with `range_too`) nor auto (None: it is
    one). The field takes any value, so its type is checked before anything reads it as a number."""
    low, high = BUDGET_RANGE
    number = not isinstance(budget, bool) and isinstance(budget, int)
    if budget == AUTO or (number and (not range_too or low <= budget <= high)):
        return None
    return f"algorithm.budget={budget}: must be an integer in {low}..{high}, or auto (chosen a round)"


def _one_path_errors(
    cfg: DraftView,
    what: str,
    algorithms: tuple[str, ...],
    drafters: tuple[str, ...],
    also: tuple[tuple[str, str, Any], ...] = (),
) -> list[str]:
    """The one line refusing a setting (`what`: it and what it does) that serves only one i.i.d. path of a
    certified verifier and drafter, with nothing that needs every round's length fixed (drafting ahead, a
    paired comparison), and what `also` needs (each: the key, what it allows, the run's value where it does
    not, else None): what it serves, then the run's values that it does not; none: no line."""
    a = cfg.algorithm
    needs = [f"algorithm={'/'.join(algorithms)}", "algorithm.K=1", f"drafter={'/'.join(drafters)}", "drafter.ahead=off"]
    needs += ["no algorithm.compare", *(need for _, need, _ in also)]
    fixed = {
        "algorithm": a.name if a.name not in algorithms else None,
        "algorithm.K": a.K if a.K != 1 else None,
        "drafter": cfg.drafter.name if cfg.drafter.name not in drafters else None,
        "drafter.ahead": cfg.drafter.ahead if cfg.drafter.ahead != "off" else None,
        "algorithm.compare": a.compare or None,
        **{key: value for key, _, value in also},
    }
    got = " ".join(f"{key}={value}" for key, value in fixed.items() if value is not None)
    return [f"{what} ({', '.join(needs)}); got {got}"] if got else []


def auto_errors(cfg: DraftView) -> list[str]:
    """algorithm.L=auto where the adaptive policy serves the run: a verifier of one path certified under
    it (`core.adaptive`), a drafter that samples that path from the draft alone, and nothing that needs
    every round's length fixed (drafting ahead, a paired comparison)."""
    from speculab.registry import ADAPTIVE_ALGORITHMS, ADAPTIVE_DRAFTERS

    if cfg.algorithm.L != AUTO:
        return []
    what = "algorithm.L=auto: chooses the length of one i.i.d. path"
    return _one_path_errors(cfg, what, ADAPTIVE_ALGORITHMS, ADAPTIVE_DRAFTERS)


def stop_errors(cfg: DraftView) -> list[str]:
    """algorithm.confidence_stop: 0 or a number in (0, 1), on only where its certificate covers the run (one
    sampled path checked by a verifier without a carry, nothing that needs the round's length fixed: drafting
    ahead, a paired comparison) and where it can stop at all (T > 0: at T = 0 the draft's law is one-hot)."""
    from speculab.registry import SAMPLED_PATH_DRAFTERS, STOP_ALGORITHMS

    stop, temperature = cfg.algorithm.confidence_stop, cfg.sampling.temperature
    if isinstance(stop, bool) or not isinstance(stop, int | float) or not 0 <= stop < 1:
        return [f"algorithm.confidence_stop={stop!r}: must be 0 (off) or a number in (0, 1)"]
    if not stop:
        return []
    what = "algorithm.confidence_stop: stops one sampled path"
    greedy = ("sampling.temperature", "sampling.temperature > 0", temperature if temperature == 0 else None)
    return _one_path_errors(cfg, what, STOP_ALGORITHMS, SAMPLED_PATH_DRAFTERS, (greedy,))


def ahead_nodes(ahead: str, budget: int, length: int | None) -> int:
    """The draft forest's nodes a round drafted ahead holds (`drafter.ahead`); 0 without drafting ahead."""
    from speculab.drafting.ahead import speculation_nodes

    return speculation_nodes(budget, length) if ahead != "off" and length else 0


def algorithm_errors(cfg: DraftView, found: dict[str, Checkpoint]) -> list[str]:
    """K and L in their ranges; algorithm, K, node rule, drafter and tree settings against the registry."""
    from speculab.registry import ALGORITHMS, OT_RULES, drafter_name_error, get_algorithm, node_rule_error

    algorithm, drafter = cfg.algorithm, cfg.drafter
    errors: list[str] = []
    within(errors, "algorithm.K", algorithm.K, K_RANGE)
    within(errors, "algorithm.L", draft_length(algorithm), L_RANGE)
    errors += auto_errors(cfg) + stop_errors(cfg)
    if (error := drafter_name_error(drafter.name)) is not None:
        errors.append(error)
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
    errors += _compare_errors(algorithm)
    return errors + _drafter_errors(cfg) + _tree_errors(algorithm) + _ahead_errors(cfg)


def _drafter_errors(cfg: DraftView) -> list[str]:
    """A drafter the algorithm takes, and `drafter.path` only for a drafter that reads one."""
    from speculab.registry import ALGORITHMS, DRAFTERS

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


def _ahead_errors(cfg: DraftView) -> list[str]:
    """Drafting ahead: its mode, budget and fan-out, and what it drafts ahead for: one path (K = 1) of
    i.i.d. tokens, which a path verifier checks (speculab.drafting.ahead); its settings only with it on."""
    from speculab.drafting.ahead import FAN_OUTS
    from speculab.registry import ALGORITHMS, DRAFTERS

    drafter, algorithm = cfg.drafter, cfg.algorithm
    errors: list[str] = []
    choice(errors, "drafter.ahead", drafter.ahead, AHEAD_MODES)
    choice(errors, "drafter.ahead_fan_out", drafter.ahead_fan_out, FAN_OUTS)
    within(errors, "drafter.ahead_budget", drafter.ahead_budget, AHEAD_BUDGET_RANGE)
    if drafter.ahead == "off":
        default = DrafterConfig()
        moved = [
            f"drafter.{key}={getattr(drafter, key)!r}"
            for key in ("ahead_budget", "ahead_fan_out")
            if getattr(drafter, key) != getattr(default, key)
        ]
        return errors + [f"{m}: applies with drafter.ahead=ssd (now off)" for m in moved]
    samplers = [name for name, d in DRAFTERS.items() if d.proposes == "paths"]
    paths = [n for n, s in ALGORITHMS.items() if not s.tree_builder and set(samplers) & set(s.drafters)]
    if drafter.ahead == "ssd" and (algorithm.K != 1 or algorithm.name not in paths or drafter.name not in samplers):
        errors.append(
            f"drafter.ahead=ssd: drafts ahead for one i.i.d. path (algorithm.K=1, drafter={'/'.join(samplers)}) "
            f"checked by a path verifier ({', '.join(paths)}); got algorithm={algorithm.name} "
            f"algorithm.K={algorithm.K} drafter={drafter.name}"
        )
    return errors


def _tree_errors(algorithm: AlgorithmConfig) -> list[str]:
    """A tree algorithm's budget and builder; `algorithm.tree` and `algorithm.budget` away from their
    defaults for an algorithm that builds no tree."""
    from speculab.drafting.ddtree import CHAIN, TREES
    from speculab.registry import ALGORITHMS

    errors: list[str] = []
    if ALGORITHMS[algorithm.name].tree_builder:
        if algorithm.budget == AUTO and algorithm.tree == CHAIN:
            errors.append("algorithm.budget=auto: chooses a best-first tree's budget; algorithm.tree=chain has none")
        elif (error := budget_error(algorithm.budget, range_too=True)) is not None:
            errors.append(error)
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
    """`algorithm.compare`: path verifiers, beside a path algorithm, lossless at K unless allowed; and
    `algorithm.compare_repeats` within its range, set or not."""
    from speculab.registry import ALGORITHMS, PATH_ALGORITHMS

    errors: list[str] = []
    within(errors, "algorithm.compare_repeats", algorithm.compare_repeats, REPEATS_RANGE)
    if not algorithm.compare:
        return errors
    if ALGORITHMS[algorithm.name].tree_builder:
        tree = f"algorithm.compare: algorithm={algorithm.name} drafts a tree; compare needs i.i.d. paths"
        return [*errors, f"{tree} (path algorithms)"]
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
    return errors
