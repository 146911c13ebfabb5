"""A point's shape (what it decodes: algorithm, draft shape, temperature, drafter, dataset, model)
and its whole result, built once and read by every renderer.

`PointShape` comes from a resolved config (`PointShape.of`, as the point runs) or from a logged
run's params (`PointShape.from_params`, as the report reads it back); either way the same fields
decide its name and which of K, a tree and a budget it shows: K for i.i.d. paths, the tree for a
tree algorithm, and the budget for a best-first tree only (a chain has none).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

from speculab.config import Config
from speculab.config.algorithm import AUTO, AUTO_LONGEST, BUDGETS, draft_length, tree_budget
from speculab.core.measure import UnitTotals
from speculab.drafting.ddtree import BEST_FIRST, CHAIN
from speculab.registry import ALGORITHMS, method_label, method_rank
from speculab.results.names import AR_PREFIX, HF_PREFIX, Figures, flatten, parse

NAME_JOIN = " · "  # between the parts of a point's name


def ahead_shape(mode: str, budget: int, fan_out: str) -> str | None:
    """How a point drafts ahead, as its name shows it: `ssd B=8` (`ssd B=8 uniform` for a fan-out other than
    the default geometric one), or None where it does not (`drafter.ahead=off`)."""
    if mode == "off":
        return None
    return f"{mode} B={budget}" + ("" if fan_out == "geometric" else f" {fan_out}")


def sliced(prompts: int | None, part: list[int] | None) -> tuple[int | None, str | None]:
    """(the prompts a point decodes, the slice it decodes in words) of `dataset.num_prompts` and
    `dataset.slice`: 12 and `0:12 of 32` for [0, 12] of 32; the count and None without a slice."""
    if part is None:
        return prompts, None
    return part[1] - part[0], f"{part[0]}:{part[1]} of {prompts if prompts is not None else 'all'}"


@dataclass(frozen=True)
class PointShape:
    """What a point decodes, with None for what its algorithm does not have."""

    algorithm: str
    node_rule: str | None  # a walk's node rule where the algorithm has several (its own first)
    K: int | None  # i.i.d. paths; None for a tree algorithm
    L: int  # the draft length; with `adaptive`, the longest a round may draft
    tree: str | None  # a tree algorithm's tree (`best_first`, `chain`); None for i.i.d. paths
    budget: int | None  # a best-first tree's node budget (with `budget_auto`, the largest a round may build)
    temperature: float
    drafter: str
    dataset: str
    prompts: int | None  # None: every prompt of the dataset
    model: str
    top_k: int  # the draft's truncation (0: none)
    max_new_tokens: int
    batch_size: int
    seed: int
    ahead: str | None = None  # drafting ahead (`drafter.ahead`): `ssd B=8`, with a fan-out other than geometric
    part: str | None = None  # a slice of the sample (`dataset.slice`, a race's stage): `0:12 of 32`
    sample_seed: int | None = None  # the seed the prompts were drawn with (`dataset.sample_seed`; None: the first)
    adaptive: bool = False  # algorithm.L=auto: each round's length chosen (`core.adaptive`), shown as L=auto
    stop: float = 0.0  # algorithm.confidence_stop (0: off), shown as stop=0.3
    budget_auto: bool = False  # algorithm.budget=auto: each round's budget chosen (`core.adaptive_budget`), B=auto

    def __post_init__(self) -> None:
        """The one rule for what a shape shows: K for i.i.d. paths, the tree (and a best-first tree's
        budget) for a tree algorithm, a node rule where the algorithm has several."""
        spec = ALGORITHMS.get(self.algorithm)
        is_tree = spec is not None and spec.tree_builder
        shown = {
            "node_rule": self.node_rule if spec is not None and spec.node_rules else None,
            "K": None if is_tree else self.K,
            "tree": self.tree if is_tree else None,
            "budget": self.budget if is_tree and self.tree == BEST_FIRST else None,
            "budget_auto": self.budget_auto and is_tree and self.tree == BEST_FIRST,
        }
        for name, value in shown.items():
            object.__setattr__(self, name, value)  # a frozen dataclass sets its own fields this way

    @classmethod
    def of(cls, cfg: Config) -> PointShape:
        """The shape of a resolved config (`RunPlan.cfg`: L set)."""
        a, s = cfg.algorithm, cfg.sampling
        d, data = cfg.drafter, cfg.dataset
        count, part = sliced(data.num_prompts, data.slice)
        return cls(
            a.name, a.node_rule, a.K, draft_length(a), a.tree, tree_budget(a), s.temperature, d.name, data.name,
            count, cfg.model.name, s.top_k, s.max_new_tokens, s.batch_size, s.seed,
            ahead_shape(d.ahead, d.ahead_budget, d.ahead_fan_out), part, data.sample_seed, a.L == AUTO,
            float(a.confidence_stop), a.budget == AUTO,
        )  # fmt: skip

    @classmethod
    def from_params(cls, params: Mapping[str, str]) -> PointShape:
        """The shape of a logged point run, from its params (the flattened config, as strings)."""

        def number(key: str, default: int = 0) -> int:
            text = params.get(key)
            return default if text in (None, "None") else int(float(text))

        adaptive, budget_auto = params.get("algorithm.L") == AUTO, params.get("algorithm.budget") == AUTO
        length = AUTO_LONGEST if adaptive else number("algorithm.L")
        prompts = params.get("dataset.num_prompts")
        span = params.get("dataset.slice")
        count, part = sliced(
            None if prompts in (None, "None") else number("dataset.num_prompts"),
            None if span in (None, "None") else [int(v) for v in span.strip("[]").split(",")],
        )
        return cls(
            params.get("algorithm.name", "?"), params.get("algorithm.node_rule"), number("algorithm.K", 1),
            length, params.get("algorithm.tree"), BUDGETS[-1] if budget_auto else number("algorithm.budget"),
            float(params.get("sampling.temperature", "nan")), params.get("drafter.name", "?"),
            params.get("dataset.name", "?"), count,
            params.get("model.name", "?"), number("sampling.top_k"), number("sampling.max_new_tokens"),
            number("sampling.batch_size", 1), number("sampling.seed"),
            ahead_shape(params.get("drafter.ahead", "off"), number("drafter.ahead_budget"),
                        params.get("drafter.ahead_fan_out", "geometric")), part,
            None if params.get("dataset.sample_seed") in (None, "None") else number("dataset.sample_seed"), adaptive,
            float(params.get("algorithm.confidence_stop", "0")), budget_auto,
        )  # fmt: skip

    @property
    def method(self) -> str:
        """The method as the papers name it (`speculab.registry.method_label`)."""
        return method_label(self.algorithm, self.node_rule or "", self.drafter, self.tree or "")

    @property
    def method_rank(self) -> tuple[int, int]:
        """Where the method sorts in the papers' order (`speculab.registry.method_rank`)."""
        spec = ALGORITHMS.get(self.algorithm)
        own = spec.node_rules[0] if spec is not None and spec.node_rules else ""
        return method_rank(self.algorithm, self.node_rule or own)

    @property
    def draft(self) -> str:
        """The draft shape: `K=4`, `best_first B=64` or `chain`."""
        if self.tree is None:
            return f"K={self.K}"
        return f"{self.tree} B={self.budgeted}" if self.budget is not None else self.tree

    @property
    def budgeted(self) -> int | str | None:
        """A best-first tree's budget as names, tables and the report show it: 64, or `auto` for a budget
        chosen each round (None: no budget)."""
        return AUTO if self.budget_auto else self.budget

    @property
    def length(self) -> str:
        """The draft length as a name shows it: `8`, or `auto` for a length chosen each round."""
        return AUTO if self.adaptive else str(self.L)

    @property
    def stopped(self) -> str:
        """The confidence stop as a name shows it: ` stop=0.3`, or nothing where it is off."""
        return f" stop={self.stop:g}" if self.stop else ""

    @property
    def drafted(self) -> str:
        """The draft shape in words: `K=4 i.i.d. paths of L=8 tokens`, `a best-first tree of 64 nodes,
        depth 8`, `the drafter's chain, depth 8`."""
        if self.tree is None:
            stop = f", each stopped after a token of draft probability below {self.stop:g}" if self.stop else ""
            return f"K={self.K} i.i.d. path{'s' if self.K != 1 else ''} of L={self.length} tokens{stop}"
        if self.tree == CHAIN:
            return f"the drafter's chain, depth {self.L}"
        if self.budget_auto:
            return f"a best-first tree of a budget chosen a round ({BUDGETS[0]}..{self.budget} nodes), depth {self.L}"
        return f"a best-first tree of {self.budget} nodes, depth {self.L}"

    def columns(self) -> dict[str, str | int | float]:
        """The shape as a table row's leading columns: algorithm, K or the tree (and a budget), L, T,
        drafter; a column the shape does not have is left out."""
        draft = {"K": self.K, "tree": self.tree, "budget": self.budgeted}
        shown = {key: value for key, value in draft.items() if value is not None}
        ahead = {} if self.ahead is None else {"ahead": self.ahead}
        stop = {"stop": self.stop} if self.stop else {}
        return {
            "algorithm": self.algorithm,
            **shown,
            "L": self.length if self.adaptive else self.L,
            **stop,
            "T": self.temperature,
            "drafter": self.drafter,
            **ahead,
        }

    @property
    def prompt_count(self) -> str:
        return "all" if self.prompts is None else str(self.prompts)

    @property
    def name_parts(self) -> tuple[str, str, str, str]:
        """The parts of the point's name: algorithm (and a node rule other than its own), draft shape, L
        and T; drafter; dataset and prompt count; model. A sweep's labels keep the parts its points differ in."""
        spec = ALGORITHMS.get(self.algorithm)
        own = spec.node_rules[0] if spec is not None and spec.node_rules else None
        rule = f"/{self.node_rule}" if self.node_rule is not None and self.node_rule != own else ""
        verifier = f"{self.algorithm}{rule} {self.draft} L={self.length}{self.stopped} T={self.temperature}"
        drafter = self.drafter if self.ahead is None else f"{self.drafter} ahead {self.ahead}"
        part = f" [{self.part}]" if self.part is not None else ""
        return verifier, drafter, f"{self.dataset}×{self.prompt_count}{part}", self.model

    @property
    def name(self) -> str:
        """The point's name: its `name_parts`, ` · `-joined."""
        return NAME_JOIN.join(self.name_parts)


UNITS_ARTIFACT = "units.json"  # a point's `PointUnits`, logged with its run


@dataclass(frozen=True)
class PointUnits:
    """What a point measured unit by unit: each unit's prompt ids and each method's sums
    (`core.measure.UnitTotals`; None: not run). Its comparisons with its baselines and with other points
    pair on these units (`results.verdicts`); a run logs them as UNITS_ARTIFACT, so a resumed sweep
    and the report compare points measured in other processes."""

    prompts: tuple[tuple[str, ...], ...]  # [unit]: the ids of the prompts one batch decodes together
    speculative: UnitTotals
    autoregressive: UnitTotals | None = None
    generate: UnitTotals | None = None
    kept: tuple[float, ...] = ()  # [prompt]: tokens the speculative decode kept (block efficiency's numerator)
    rounds: tuple[float, ...] = ()  # [prompt]: its sequence-rounds (the denominator)
    accepted: tuple[float, ...] = ()  # [prompt]: its accepted draft tokens (tau summed over its rounds)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> PointUnits:
        found = json.loads(text)

        def totals(key: str) -> UnitTotals | None:
            sums = found.get(key)
            return None if sums is None else UnitTotals(*(tuple(sums[f]) for f in ("tokens", "wall_s", "cpu_s")))

        speculative = totals("speculative")
        assert speculative is not None  # every point decodes speculatively
        units = tuple(tuple(unit) for unit in found["prompts"])
        per_prompt = (tuple(found.get(key, ())) for key in ("kept", "rounds", "accepted"))
        return cls(units, speculative, totals("autoregressive"), totals("generate"), *per_prompt)

    @property
    def prompt_ids(self) -> tuple[str, ...]:
        """Every prompt's id, in order (what per-prompt sums pair on)."""
        return tuple(i for unit in self.prompts for i in unit)

    @property
    def acceptance_lengths(self) -> tuple[float, ...]:
        """[prompt] each prompt's own acceptance length, 1 + accepted over rounds (none: not kept, or no round)."""
        return tuple(1.0 + a / r for a, r in zip(self.accepted, self.rounds) if r)

    @property
    def batch_size(self) -> int:
        return max(map(len, self.prompts), default=1)

    @classmethod
    def joined(cls, parts: Sequence[PointUnits]) -> PointUnits:
        """One point's units over the disjoint prompts of several decodes, in order (a race's stages): a
        baseline's sums only where every part has them."""

        def totals(each: list[UnitTotals | None]) -> UnitTotals | None:
            if any(t is None for t in each):
                return None
            kept = [t for t in each if t is not None]
            return UnitTotals(*(tuple(x for t in kept for x in getattr(t, f)) for f in ("tokens", "wall_s", "cpu_s")))

        speculative = totals([p.speculative for p in parts])
        assert speculative is not None  # every part decodes speculatively
        return cls(
            tuple(unit for p in parts for unit in p.prompts),
            speculative,
            totals([p.autoregressive for p in parts]),
            totals([p.generate for p in parts]),
            tuple(x for p in parts for x in p.kept),
            tuple(x for p in parts for x in p.rounds),
            tuple(x for p in parts for x in p.accepted),
        )


@dataclass(frozen=True)
class PointResult:
    """A finished point: its shape, its own figures and its baselines' (None: not run), what it measured
    unit by unit (None: a run logged before units were kept), and whether it finished in an earlier
    launch of a resumed sweep (its figures then read back from its run)."""

    shape: PointShape
    figures: Figures
    autoregressive: Figures | None = None
    generate: Figures | None = None
    units: PointUnits | None = None
    resumed: bool = False

    @classmethod
    def from_logged(
        cls, shape: PointShape, logged: Mapping[str, float], units: PointUnits | None = None, resumed: bool = False
    ) -> PointResult:
        """A point's result read back from the metrics its run logged (MLflow names) and its units: a
        point a resumed sweep skips, or a run the report reads."""
        ar, hf = parse(logged, AR_PREFIX), parse(logged, HF_PREFIX)
        return cls(shape, parse(logged), ar or None, hf or None, units, resumed)

    def logged(self) -> dict[str, float]:
        """What a run logs of the point as MLflow metrics (`from_logged` reads it back): its figures, and
        its baselines' under their prefixes."""
        ar = flatten(self.autoregressive, AR_PREFIX) if self.autoregressive is not None else {}
        hf = flatten(self.generate, HF_PREFIX) if self.generate is not None else {}
        return flatten(self.figures) | ar | hf

    @property
    def generate_vs_ar(self) -> float:
        """transformers' generate's own paired speedup over the engine's loop (NaN: not both run)."""
        return self.generate.value("speedup_vs_ar") if self.generate is not None else math.nan


@dataclass(frozen=True)
class FailedPoint:
    """A sweep point that failed mid-run (its run FAILED with the units it finished): what the sweep's
    parent reports while the sweep goes on."""

    shape: PointShape
    reason: str  # one line: the error's type and message
