"""One experiment point: resolve, prepare, measure, summarise, log.

`run` is what the Hydra entry point calls with a `Config`: it resolves it once (`config.resolve`:
validated, with everything derived from it fixed in a `RunPlan`) and decodes the point in four
steps that take the plan: `prepare` (prompts, tokenizer, the loop and its models), `measure_point`
(every method interleaved, unit by unit), `summarise` (metrics, the console's table) and, for a tracked
point, `tracking.point_log.log_point` (MLflow's metrics and artifacts, inside the run
`tracking.runs.tracked_point` opens; an untracked run imports neither MLflow nor matplotlib). The baselines
(the engine's autoregressive loop, transformers' `generate`) run on the same target and prompts,
interleaved with the point's own decode prompt by prompt and repeated (`speculab.core.measure`), so each
speedup compares measurements taken seconds apart.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, replace
from typing import Any

from transformers import PreTrainedTokenizerBase

from speculab.config import Config, ConfigError, RunPlan, config_warnings, resolve
from speculab.config.algorithm import AUTO, BUDGETS, draft_length, tree_budget
from speculab.config.prompts import PointPrompts, point_prompts
from speculab.config.replicas import asked
from speculab.core.engine import DecodeSettings
from speculab.core.measure import Sample, Timings, UnitTotals, interleave_lanes
from speculab.core.records import PromptRecord, RunResult, concat_runs
from speculab.data import Prompt
from speculab.drafting.ahead import Ahead
from speculab.drafting.sampling import SamplingParams
from speculab.models import LMSpec
from speculab.models.dflash_layout import read_layout
from speculab.models.generate import GenerateForm
from speculab.models.roles import Conditions
from speculab.models.weights import WeightsError
from speculab.point.decoders import Decoders, merged
from speculab.process import jobs
from speculab.registry import DRAFTERS
from speculab.results.figures import (
    autoregressive_figures,
    category_figures,
    generate_figures,
    paired_figures,
    prompt_figures,
    run_figures,
    speed_figures,
)
from speculab.results.names import Figures, flatten
from speculab.results.point import PointResult, PointShape, PointUnits
from speculab.results.verdicts import compared
from speculab.runtime import fitting_copies, loop_groups, runtime_metrics, start_loop
from speculab.runtime.loop import METHODS, TARGET_ROLE, PointWork, Unit
from speculab.runtime.placement import ClusterError
from speculab.show.board import point_progress
from speculab.show.console import say, show
from speculab.show.summary import paired_table, print_summary, summary_title
from speculab.tracking.tracker import NoopTracker, Tracker

SPREAD_TAG = "speculab.spread"  # a point whose units were spread over replicas (`cluster.spread`) says so


@dataclass(frozen=True)
class PointOutcome:
    """What a point returns to the Hydra entry point (and a sweep's callback): its plan and result."""

    plan: RunPlan
    result: PointResult


def model_specs(plan: RunPlan) -> tuple[LMSpec, LMSpec]:
    """(target, draft) as the model roles load them, from the plan's directories, devices and passes."""
    cfg = plan.cfg
    drafter = DRAFTERS[cfg.drafter.name]
    dtype, threads = cfg.model.dtype, plan.threads
    features: tuple[int, ...] = ()
    if drafter.target_features:  # the target returns what the drafter is conditioned on
        features = read_layout(plan.draft_dir).target_layer_ids
    sharded = cfg.cluster.draft_placement == "sharded"  # a shard on each of the target's ranks, loaded the same way
    draft = LMSpec(
        backend=drafter.backend or cfg.model.backend,
        path=str(plan.draft_dir),
        dtype=dtype,
        device=plan.draft_device,
        threads=threads,
        tp_size=cfg.cluster.tp_size if sharded else 1,
        tp_backend=cfg.cluster.tp_backend,
        passes=plan.draft_passes,
        compile=cfg.model.compile,
        target_path=str(plan.target_dir) if drafter.target_features else "",
    )
    target = LMSpec(
        backend=cfg.model.backend,
        path=str(plan.target_dir),
        dtype=dtype,
        device=plan.target_device,
        threads=threads,
        tp_size=cfg.cluster.tp_size,
        tp_backend=cfg.cluster.tp_backend,
        feature_layers=features,
        passes=plan.target_passes,
        compile=cfg.model.compile,
    )
    return target, draft


def settings_of(plan: RunPlan, eos_token_id: int | None) -> DecodeSettings:
    s, a = plan.cfg.sampling, plan.cfg.algorithm
    return DecodeSettings(
        num_paths=a.K,
        length=draft_length(a),  # a plan's config has it resolved
        sampling=SamplingParams(s.temperature, s.top_k, s.top_p, a.confidence_stop),
        max_new_tokens=s.max_new_tokens,
        batch_size=s.batch_size,
        seed=s.seed,
        eos_token_id=eos_token_id,
        tree_nodes=plan.largest_tree,
        adaptive=a.L == AUTO,
    )


def units_of(prompts: list[list[int]], batch_size: int) -> tuple[Unit, ...]:
    return tuple((first, prompts[first : first + batch_size]) for first in range(0, len(prompts), batch_size))


def point_work(
    cfg: Config, prompts: list[list[int]], settings: DecodeSettings, verifier_passes: str = "eager"
) -> PointWork:
    a = cfg.algorithm
    form = GenerateForm.of(cfg.measure.generate, prompts, settings.max_new_tokens)
    return PointWork(
        a.name,
        a.node_rule,
        cfg.drafter.name,
        a.tree,
        tree_budget(a),
        tuple(a.compare or ()),
        a.compare_repeats,
        units_of(prompts, settings.batch_size),
        settings,
        form,
        verifier_passes,
        Ahead(cfg.drafter.ahead_budget, cfg.drafter.ahead_fan_out) if cfg.drafter.ahead == "ssd" else None,
        BUDGETS if a.budget == AUTO else (),
    )


def run(cfg: Config, plan: RunPlan | None = None) -> PointOutcome:
    """Decode the dataset speculatively (and autoregressively), track it live, print a summary.

    ``plan``: the point's, where a sweep resolved it before its first point started; else the config
    is resolved here. The MLflow run exists from the start (RUNNING) and ends FINISHED, FAILED or
    KILLED; with `resume=true` a point that already finished in the same store and experiment is
    skipped, and returns what its run logged (so that a resumed sweep's parent reports it too)."""
    plan = plan or resolve(cfg)
    for note in config_warnings(plan.cfg):
        say(f"speculab: warning: {note}")
    if plan.preset_name:
        say(
            f"speculab: model: the checkpoints loaded are not preset {plan.preset_name}'s: filed as "
            f"{plan.cfg.model.name}, after their directories (model.name=NAME names the pair)"
        )
    shape = PointShape.of(plan.cfg)
    if not plan.cfg.tracking.enabled:  # resume=true needs a store (refused without one)
        return PointOutcome(plan, decode_point(plan, shape, NoopTracker()))
    # MLflow, pandas and matplotlib: 1.9 s of imports on 2 cores (python -X importtime), paid by a tracked run only
    from speculab.tracking.runs import tracked_point

    return PointOutcome(plan, tracked_point(plan, shape, decode_point))


def measured_under(conditions: dict[str, Conditions]) -> str:
    """Where each figure was measured: the processes and torch threads of the target (and of
    transformers' generate, which runs in the target's process), of the draft and of the loop."""
    here = os.getpid()
    return " · ".join(f"{role}: {where.describe(here)}" for role, where in conditions.items())


@dataclass(frozen=True)
class Prepared:
    """A point ready to decode: its prompts, their tokenizer, and its loop (or one a replica with
    `cluster.spread`) with the models started."""

    prompts: list[Prompt]
    tokenizer: PreTrainedTokenizerBase
    # `runtime.start_loop`'s: a PointLoop here, or loop group proxies (`cluster.spread`: one a replica)
    loops: list[Any]
    units: int


@dataclass(frozen=True)
class Measured:
    """What `measure_point` collected: each method's timings and first-repetition results, the runtime's
    counts, and where it was measured."""

    timings: Timings
    decoders: Decoders
    runtime: dict[str, float]
    conditions: str  # the processes and threads each figure was measured in (`measured_under`)


def prepare(plan: RunPlan, loaded: PointPrompts) -> Prepared:
    """Start the point's loop where the plan puts it (with `cluster.spread`, one on each replica), with
    its work cut into units."""
    target_spec, draft_spec = model_specs(plan)
    work = point_work(plan.cfg, loaded.encoded, settings_of(plan, loaded.tokenizer.eos_token_id), plan.verifier_passes)
    copies = spread_copies(plan, target_spec, draft_spec, len(work.units))
    placements = [replace(plan.placement, replica=plan.placement.replica + r) for r in range(copies)]
    try:
        loops = [start_loop(plan.loop, target_spec, draft_spec, work, placement) for placement in placements]
    except WeightsError as err:  # what only the weights' values tell: refused in one line, as validation refuses
        raise ConfigError.listing([str(err)]) from None
    return Prepared(loaded.prompts, loaded.tokenizer, loops, len(work.units))


def spread_copies(plan: RunPlan, target: LMSpec, draft: LMSpec, units: int) -> int:
    """The replicas a point's units are spread over: 1 without `cluster.spread`, else `replica_copies`."""
    return replica_copies(plan, target, draft, units) if plan.cfg.cluster.spread else 1


def replica_copies(plan: RunPlan, target: LMSpec, draft: LMSpec, most: int) -> int:
    """`cluster.replicas` as a count, at most `most`: the integer asked for, or for auto the copies of the
    point's groups that the alive nodes hold."""
    count = asked(plan.cfg.cluster.replicas)
    return min(most, count if count is not None else fitting_copies(plan.loop, target, draft, plan.placement, most))


def measure_point(
    plan: RunPlan, shape: PointShape, point: Prepared, tracker: Tracker, lanes: list[Decoders]
) -> Measured:
    """Every method the config asks for on every unit, `measure.repeats` times interleaved, after one
    untimed warm-up each; each prompt's metrics are logged live as the speculative decode finishes it,
    and what every method decoded is kept in `lanes` (a loop's `Decoders` each; several with
    `cluster.spread`) as it finishes (a failure keeps it)."""
    cfg = plan.cfg
    chosen = {"speculative": True, "autoregressive": cfg.baseline, "generate": cfg.baseline_hf}
    methods = [{method: lane.method(method) for method in METHODS if chosen[method]} for lane in lanes]
    repeats, finished, logging = cfg.measure.repeats, 0, threading.Lock()
    if len(lanes) > 1:
        tracker.set_tags({SPREAD_TAG: f"{point.units} units over {len(lanes)} replicas, figures pooled over units"})
    with ExitStack() as stack:
        replica = plan.placement.replica  # the first lane's; the others' follow it
        counted = [stack.enter_context(runtime_metrics(lane.groups, replica + r)) for r, lane in enumerate(lanes)]
        # Untimed, each lane's first unit once by each method: one-off costs (the allocator, lazy imports,
        # Ray actors, a sweep's first point) then bias none of them. Inside the block, so that an actor
        # restart during the warm-up counts in runtime/restarts like any other.
        for first, own in enumerate(methods):
            for method in own.values():
                method(first, -1)
        label = f"{shape.name_parts[0]} · {len(methods[0])} methods × {repeats}"  # fits a bar at 80 columns

        def log_prompt(record: PromptRecord) -> None:
            nonlocal finished
            with logging:  # the lanes' threads log one at a time
                finished += 1
                tracker.log_metrics(flatten(prompt_figures(record)), step=finished)

        with point_progress(label, point.units * repeats * len(methods[0])) as advance:

            def advancing(method: Callable[[int, int], Sample]) -> Callable[[int, int], Sample]:
                def run(unit: int, repeat: int) -> Sample:
                    sample = method(unit, repeat)
                    advance()
                    return sample

                return run

            for lane in lanes:
                lane.on_prompt = log_prompt
            runs = [{m: advancing(run) for m, run in own.items()} for own in methods]
            timings = interleave_lanes(runs, point.units, repeats)
    decoders = merged(lanes)
    found = pooled(counted)
    runtime = found | ({"time_ray_s": decoders.ray_s} if found else {})
    if found and decoders.rounds:
        runtime["ray_calls_per_round"] = decoders.model_calls / decoders.rounds
    if decoders.host_syncs_per_round is not None:
        runtime["host_syncs_per_round"] = decoders.host_syncs_per_round
    conditions = [loop.conditions() for loop in point.loops]
    runtime["ar_lean"] = float(all(c[TARGET_ROLE].lean for c in conditions))
    return Measured(timings, decoders, runtime, " | ".join(map(measured_under, conditions)))


def pooled(counted: list[dict[str, float]]) -> dict[str, float]:
    """The runtime's counts over the lanes: memory peaks the largest, the rest summed."""
    found: dict[str, float] = {}
    for lane in counted:
        for key, value in lane.items():
            both = (found[key], value) if key in found else (value,)
            found[key] = max(both) if key.startswith("mem_peak") else sum(both)
    return found


def baseline_figures(cfg: Config, measured: Measured) -> tuple[Figures | None, Figures | None]:
    """(the engine's autoregressive loop's figures, transformers' generate's), None where not run."""
    timings, runs = measured.timings, measured.decoders.runs
    ar = autoregressive_figures(runs["autoregressive"], timings["autoregressive"]) if cfg.baseline else None
    hf = None
    if cfg.baseline_hf:
        hf = generate_figures([t for result in runs["generate"] for t in result.tokens], timings, cfg.baseline)
    return ar, hf


def point_units(prompts: list[Prompt], batch_size: int, timings: Timings, spec: RunResult) -> PointUnits:
    """Each unit's prompt ids, each method's sums per unit (None: not run) and the speculative decode's
    kept tokens and rounds per prompt."""
    ids = tuple(
        tuple(p.id for p in prompts[first : first + batch_size]) for first in range(0, len(prompts), batch_size)
    )

    def sums(method: str) -> UnitTotals | None:
        return UnitTotals.of(timings[method]) if method in timings else None

    speculative = sums("speculative")
    assert speculative is not None  # every point decodes speculatively
    kept = tuple(float(len(p.tokens)) for p in spec.prompts)
    rounds = tuple(float(len(p.accepted)) for p in spec.prompts)
    accepted = tuple(float(sum(p.accepted)) for p in spec.prompts)
    return PointUnits(ids, speculative, sums("autoregressive"), sums("generate"), kept, rounds, accepted)


def summarise(plan: RunPlan, shape: PointShape, measured: Measured, prompts: list[Prompt]) -> tuple[PointResult, str]:
    """The point's result and its whole summary as text; prints the summary table (a sweep's point: its
    headline rows) and, with a paired comparison, its table."""
    cfg, decoders = plan.cfg, measured.decoders
    spec = concat_runs(decoders.runs["speculative"])
    speed = speed_figures(
        measured.timings,
        "speculative",
        "autoregressive" if cfg.baseline else None,
        "generate" if cfg.baseline_hf else None,
    )
    figures = (
        run_figures(spec) | category_figures(spec, [p.category for p in prompts]) | speed | Figures(measured.runtime)
    )
    if decoders.paired:
        figures |= paired_figures(decoders.paired_sums(), cfg.algorithm.name) | {"time_paired_s": spec.paired_s}
    ar, hf = baseline_figures(cfg, measured)
    result = PointResult(shape, figures, ar, hf, point_units(prompts, cfg.sampling.batch_size, measured.timings, spec))
    title = summary_title(result, cfg.measure.repeats)
    whole = print_summary(title, result, jobs.current().output_dir, measured.conditions, cfg.measure.generate)
    if decoders.paired:
        verdicts = compared(decoders.paired_sums(), cfg.algorithm.name)
        show(paired_table(figures, cfg.algorithm.name, cfg.algorithm.compare_repeats, verdicts))
    return result, whole


def given_up(shape: PointShape, why: str) -> Exception:
    """What a point whose groups were lost raises: ReplicaLost where its replica gives it up to another of
    the sweep (`jobs.Seat.give_up`; the launcher runs it again there), else the ClusterError that fails it."""
    if (job := jobs.current()).give_up():
        return jobs.ReplicaLost(shape.name, why, job.replica)
    return ClusterError(why)


def decode_point(plan: RunPlan, shape: PointShape, tracker: Tracker, loaded: PointPrompts | None = None) -> PointResult:
    """Prepare, measure, summarise and log one point (its prompts `loaded` already, or loaded here). A
    cluster failure (`ClusterError`) keeps what the point finished, logged, and is raised again, saying so."""
    try:
        point = prepare(plan, loaded or point_prompts(plan))
    except ClusterError as err:  # its groups lost before its first unit (a node lost between two points)
        if tracker.records:
            from speculab.tracking.point_log import log_units_finished  # matplotlib: a tracked run's only

            log_units_finished(tracker, 0)
        raise given_up(shape, f"{err} (before the point's first unit)") from err
    lanes = [Decoders(loop, loop_groups(loop)) for loop in point.loops]
    try:
        measured = measure_point(plan, shape, point, tracker, lanes)
    except ClusterError as err:
        finished = merged(lanes).runs["speculative"]
        if tracker.records:  # an untracked run builds no figure (nor imports matplotlib)
            from speculab.tracking.point_log import Decoded, log_finished  # matplotlib: a tracked run's only

            log_finished(tracker, Decoded(finished, point.prompts, point.tokenizer))
        why = f"{err} (the point's {len(finished)} of {point.units} finished unit(s) are logged)"
        raise given_up(shape, why) from err
    result, summary = summarise(plan, shape, measured, point.prompts)
    if tracker.records:
        from speculab.tracking.point_log import Decoded, log_point  # matplotlib: a tracked run's only

        spec = measured.decoders.runs["speculative"]
        decoded = Decoded(spec, point.prompts, point.tokenizer, measured.timings["speculative"])
        log_point(tracker, result, summary, plan, measured.conditions, decoded)
    return result
