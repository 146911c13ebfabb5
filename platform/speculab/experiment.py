"""One experiment point: validate, load prompts and models, decode, measure, track, report.

`run` is what the Hydra entry point calls with a validated `Config`; everything below it
takes plain values. The baselines (the engine's autoregressive loop, transformers' `generate`)
run on the same target and prompts, interleaved with the point's own decode prompt by prompt
and repeated (`speculab.measure`), so each speedup compares measurements taken seconds apart.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, TypedDict, cast

import matplotlib.pyplot as plt
import torch
from rich.console import Console
from rich.progress import Progress
from transformers import AutoTokenizer

from speculab.algorithms import DRAFTERS
from speculab.config import (
    Config,
    checkpoint_dir,
    config_warnings,
    draft_length,
    largest_tree,
    locate,
    loop_host,
    resolve_device,
    validate,
    with_draft_length,
)
from speculab.data import encode_prompt, load_prompts
from speculab.drafting.sampling import SamplingParams
from speculab.engine import DecodeSettings, PromptRecord, RunResult, concat_runs
from speculab.loop import METHODS, PointPlan, Unit, UnitResult
from speculab.measure import Sample, baseline_speed, interleave, median_interval, paired_ratios, speed_metrics
from speculab.models import LMSpec
from speculab.models.dflash_layout import read_layout
from speculab.models.roles import Conditions
from speculab.paired import paired_metrics, paired_table
from speculab.runtime import loop_groups, runtime_metrics, start_loop
from speculab.tracking.metrics import (
    BASELINE_KEYS,
    HF_PREFIX,
    baseline_metrics,
    hf_metrics,
    mlflow_metrics,
    prompt_metrics,
    summarize,
)
from speculab.tracking.report import (
    acceptance_figure,
    print_summary,
    prompt_records,
    records_jsonl,
    records_table,
    time_split_figure,
)
from speculab.tracking.runs import (
    NOTE_TAG,
    NoopTracker,
    Tracker,
    finished_point,
    point_description,
    point_id,
    run_name,
    start_point_run,
    where,
)
from speculab.tracking.spool import tracked
from speculab.tracking.sweep import resumed_metrics

if TYPE_CHECKING:
    from speculab.runtime.proxy import GroupProxy


class CommonSpec(TypedDict):
    """The `LMSpec` fields the target and the draft share."""

    backend: str
    dtype: str
    device: str
    threads: int


def passes_on(device: str, capture: bool) -> str:
    """A transformers model's passes on `device` (`models.hf.TreeLM`): replayed from CUDA graphs when
    capture is on and the device is a GPU, else eager."""
    return "graphs" if capture and device.startswith("cuda") else "eager"


def model_specs(cfg: Config) -> tuple[LMSpec, LMSpec]:
    model = cfg.model
    device = resolve_device(cfg, model.device)
    common = CommonSpec(backend=model.backend, dtype=model.dtype, device=device, threads=cfg.runtime.torch_threads)
    drafter = DRAFTERS[cfg.drafter.name]
    target_path = str(checkpoint_dir(model, "target"))
    draft_path = str(locate(cfg, "draft")[1])
    features: tuple[int, ...] = ()
    if drafter.target_features:  # the target returns what the drafter is conditioned on
        features = read_layout(draft_path).target_layer_ids
    draft_device = resolve_device(cfg, model.draft_device or model.device)
    draft = LMSpec(
        **(common | {"backend": drafter.backend or model.backend, "device": draft_device}),
        path=draft_path,
        passes=passes_on(draft_device, model.capture),
    )
    if drafter.target_features:
        draft = replace(draft, target_path=target_path)
    target = LMSpec(
        path=target_path,
        tp_size=cfg.cluster.tp_size,
        feature_layers=features,
        passes=passes_on(device, model.capture),
        **common,
    )
    return target, draft


def settings_of(cfg: Config, eos_token_id: int | None) -> DecodeSettings:
    s = cfg.sampling
    return DecodeSettings(
        num_paths=cfg.algorithm.K,
        length=draft_length(cfg),
        sampling=SamplingParams(s.temperature, s.top_k, s.top_p),
        max_new_tokens=s.max_new_tokens,
        batch_size=s.batch_size,
        seed=s.seed,
        eos_token_id=eos_token_id,
        tree_nodes=largest_tree(cfg),
    )


def units_of(prompts: list[list[int]], batch_size: int) -> tuple[Unit, ...]:
    return tuple((first, prompts[first : first + batch_size]) for first in range(0, len(prompts), batch_size))


def point_plan(cfg: Config, prompts: list[list[int]], settings: DecodeSettings) -> PointPlan:
    a = cfg.algorithm
    return PointPlan(
        a.name,
        a.node_rule,
        cfg.drafter.name,
        a.tree,
        a.budget,
        tuple(a.compare or ()),
        a.compare_repeats,
        units_of(prompts, settings.batch_size),
        settings,
    )


def run(cfg: Config) -> dict[str, float]:
    """Decode the dataset speculatively (and autoregressively), track it live, print a summary.

    The MLflow run exists from the start (RUNNING) and ends FINISHED, FAILED or KILLED; with
    `resume=true` a point that already finished in the same store and experiment is skipped, and
    returns what its run logged (so that a resumed sweep's parent reports it too)."""
    cfg = with_draft_length(cfg)
    validate(cfg)
    for note in config_warnings(cfg):
        print(f"speculab: warning: {note}")
    point = point_id(cfg)
    if cfg.resume and (found := finished_point(cfg, point)):
        print(f"speculab: resume: {run_name(cfg)} (point {point}) already finished: {found.where}; skipped")
        return resumed_metrics(found.metrics)
    if not cfg.tracking.enabled:
        return decode_point(cfg, NoopTracker())
    tracked_run = start_point_run(cfg, point)
    with tracked(tracked_run):
        metrics = decode_point(cfg, tracked_run)
    print(f"speculab: {where(tracked_run, cfg.tracking.ui_port)}")
    return metrics


@dataclass
class Decoders:
    """The point's methods as the driver sees them: each runs one unit on the loop, wherever the loop
    runs (`speculab.loop`), and what their first repetition (`repeat` 0) decoded is kept here for the
    metrics and records; a warm-up call (`repeat` -1) keeps nothing."""

    loop: Any  # a PointLoop in this process, or the target actor's, through its group proxy
    groups: dict[str, GroupProxy]  # the Ray groups the point uses (none inline), for their Ray time
    on_prompt: Callable[[PromptRecord], None] = lambda record: None
    runs: dict[str, list[Any]] = field(default_factory=lambda: {method: [] for method in METHODS})
    paired: list[dict[str, torch.Tensor]] = field(default_factory=list)  # per unit: [rounds] per verifier
    ray_s: float = 0.0  # Ray time of the first repetition's speculative decodes
    host_syncs_per_round: float | None = None  # counted on the speculative warm-up, where the loop runs CUDA work

    def ray_clock(self) -> float:
        return sum(proxy.stats.ray_s for proxy in self.groups.values())

    def method(self, name: str) -> Callable[[int, int], Sample]:
        def run(unit: int, repeat: int) -> Sample:
            ray_s = self.ray_clock()
            done: UnitResult = self.loop.decode_unit(name, unit, repeat)
            if done.host_syncs_per_round is not None:
                self.host_syncs_per_round = done.host_syncs_per_round
            if repeat == 0:
                self.runs[name].append(done.result)
            if repeat == 0 and isinstance(done.result, RunResult) and name == "speculative":
                self.ray_s += self.ray_clock() - ray_s
                if done.paired is not None:
                    self.paired.append(done.paired)
                for record in done.result.prompts:
                    self.on_prompt(record)
            return done.sample

        return run

    def paired_units(self) -> dict[str, torch.Tensor]:
        """Per compared verifier, [U] the mean accepted length of every sequence-round of the point."""
        return {name: torch.cat([unit[name] for unit in self.paired]) for name in self.paired[0]}


CONDITIONS_TAG = "speculab.conditions"


def measured_under(conditions: dict[str, Conditions]) -> str:
    """Where each figure was measured: the processes and torch threads of the target (and of
    transformers' generate, which runs in the target's process), of the draft and of the loop."""
    here = os.getpid()
    return " · ".join(f"{role}: {where.describe(here)}" for role, where in conditions.items())


def measured_methods(cfg: Config, decoders: Decoders) -> dict[str, Callable[[int, int], Sample]]:
    """The methods a point times: its decode, and the baselines the config asks for."""
    chosen = {"speculative": True, "autoregressive": cfg.baseline, "generate": cfg.baseline_hf}
    return {method: decoders.method(method) for method in METHODS if chosen[method]}


def decode_point(cfg: Config, tracker: Tracker) -> dict[str, float]:
    """Load prompts and models, time every method interleaved, and log metrics (live per prompt,
    then final) and artifacts."""
    prompts = load_prompts(cfg.dataset.name, cfg.dataset.num_prompts, cfg.dataset.path)
    target_spec, draft_spec = model_specs(cfg)
    tokenizer = AutoTokenizer.from_pretrained(target_spec.path)
    encoded = [encode_prompt(p, tokenizer) for p in prompts]
    settings = settings_of(cfg, tokenizer.eos_token_id)
    c = cfg.cluster
    plan = point_plan(cfg, encoded, settings)
    loop = start_loop(
        loop_host(cfg),
        target_spec,
        draft_spec,
        plan,
        c.address,
        c.num_cpus,
        c.actor_cpus,
        c.draft_gpu,
        cfg.runtime.max_restarts,
    )
    groups = loop_groups(loop)
    decoders = Decoders(loop, groups)
    methods = measured_methods(cfg, decoders)
    repeats = cfg.measure.repeats
    finished: list[PromptRecord] = []

    with Progress(transient=False) as progress, runtime_metrics(groups) as measured:
        # Untimed, the first unit once by each method: one-off costs (the allocator, lazy imports, Ray
        # actors, a sweep's first point) then bias none of them. Inside the block, so that an actor
        # restart during the warm-up counts in runtime/restarts like any other.
        for method in methods.values():
            method(0, -1)
        label = f"{run_name(cfg)} · {len(methods)} method(s) × {repeats} interleaved repetition(s)"
        task = progress.add_task(label, total=len(plan.units) * repeats * len(methods))

        def log_prompt(record: PromptRecord) -> None:
            finished.append(record)
            tracker.log_metrics(prompt_metrics(record), step=len(finished))

        def advancing(method: Callable[[int, int], Sample]) -> Callable[[int, int], Sample]:
            def run(unit: int, repeat: int) -> Sample:
                sample = method(unit, repeat)
                progress.advance(task)
                return sample

            return run

        decoders.on_prompt = log_prompt
        timings = interleave({m: advancing(run) for m, run in methods.items()}, len(plan.units), repeats)
    spec = concat_runs(decoders.runs["speculative"])
    speed = speed_metrics(
        timings, "speculative", "autoregressive" if cfg.baseline else None, "generate" if cfg.baseline_hf else None
    )
    ar = hf = None
    if cfg.baseline:
        ar_summary = summarize(concat_runs(decoders.runs["autoregressive"]))
        ar = {key: ar_summary[key] for key in BASELINE_KEYS} | baseline_speed(timings["autoregressive"])
    if cfg.baseline_hf:
        hf = hf_metrics([t for result in decoders.runs["generate"] for t in result.tokens])
        hf |= baseline_speed(timings["generate"])
        if cfg.baseline:  # generate's own paired speedup over the engine's loop: the sweep plot's reference
            hf["speedup_vs_ar"] = median_interval(paired_ratios(timings["generate"], timings["autoregressive"])).value
    runtime = measured | ({"time_ray_s": decoders.ray_s} if measured else {})
    if decoders.host_syncs_per_round is not None:
        runtime["host_syncs_per_round"] = decoders.host_syncs_per_round
    title = f"{run_name(cfg)} · medians of {repeats} interleaved repetition(s), 95% intervals over prompts"
    conditions = measured_under(loop.conditions())
    tracker.set_tags({CONDITIONS_TAG: conditions})
    metrics = print_summary(title, summarize(spec) | speed, ar, hf, conditions) | runtime
    if decoders.paired:
        compared = paired_metrics(decoders.paired_units(), cfg.algorithm.name)
        Console().print(paired_table(compared, cfg.algorithm.name, cfg.algorithm.compare_repeats))
        metrics |= compared | {"time_paired_s": spec.paired_s}
    baselines = (baseline_metrics(ar) if ar else {}) | (baseline_metrics(hf, HF_PREFIX) if hf else {})
    tracker.log_metrics(mlflow_metrics(metrics) | baselines)
    tracker.set_tags({NOTE_TAG: point_description(cfg, metrics)})
    texts = [cast(str, tokenizer.decode(p.tokens)) for p in spec.prompts]  # one sequence decodes to a str
    records = prompt_records(spec, [p.id for p in prompts], texts)
    tracker.log_text(records_jsonl(records), "records.jsonl")
    tracker.log_table(records_table(records), "records_table.json")
    tracker.log_figure(acceptance_figure(spec), "acceptance_histogram.png")
    tracker.log_figure(time_split_figure(metrics), "time_split.png")
    plt.close("all")  # a sweep runs many points in this process
    return metrics | baselines
