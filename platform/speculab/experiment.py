"""One experiment point: validate, load prompts and models, decode, measure, track, report.

`run` is what the Hydra entry point calls with a validated `Config`; everything below it
takes plain values. The autoregressive baseline runs on the same target and prompts in the
same process, so speedup_vs_ar compares like with like.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TypedDict, cast

import matplotlib.pyplot as plt
import torch
from rich.console import Console
from rich.progress import Progress
from transformers import AutoTokenizer

from speculab.algorithms import DRAFTERS, get_algorithm, get_verifier
from speculab.config import Config, checkpoint_dir, config_warnings, locate, read_json, validate
from speculab.data import encode_prompt, load_prompts
from speculab.drafting.ddtree import MarginalPathDrafter, TreeDrafter, tree_builder
from speculab.drafting.sampling import SamplingParams
from speculab.engine import (
    DecodeSettings,
    Drafter,
    PromptRecord,
    RunResult,
    TargetModel,
    Verifier,
    autoregressive,
    decode,
)
from speculab.models import LMSpec
from speculab.paired import PairedComparison, paired_metrics, paired_table
from speculab.runtime import runtime_metrics, start_models
from speculab.tracking.metrics import HF_PREFIX, baseline_metrics, hf_metrics, mlflow_metrics, prompt_metrics, summarize
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


class CommonSpec(TypedDict):
    """The `LMSpec` fields the target and the draft share."""

    backend: str
    dtype: str
    device: str
    threads: int


def model_specs(cfg: Config) -> tuple[LMSpec, LMSpec]:
    model = cfg.model
    common = CommonSpec(
        backend=model.backend, dtype=model.dtype, device=model.device, threads=cfg.runtime.torch_threads
    )
    drafter = DRAFTERS[cfg.drafter.name]
    target_path = str(checkpoint_dir(model, "target"))
    draft_path = str(locate(cfg, "draft")[1])
    features: tuple[int, ...] = ()
    if drafter.target_features:  # the target returns what the drafter is conditioned on
        features = tuple(read_json(Path(draft_path) / "config.json")["dflash_config"]["target_layer_ids"])
    draft = LMSpec(**(common | {"backend": drafter.backend or model.backend}), path=draft_path)
    if drafter.target_features:
        draft = replace(draft, target_path=target_path)
    target = LMSpec(path=target_path, tp_size=cfg.cluster.tp_size, feature_layers=features, **common)
    return target, draft


def settings_of(cfg: Config, eos_token_id: int | None) -> DecodeSettings:
    s = cfg.sampling
    return DecodeSettings(
        num_paths=cfg.algorithm.K,
        length=cfg.algorithm.L,
        sampling=SamplingParams(s.temperature, s.top_k, s.top_p),
        max_new_tokens=s.max_new_tokens,
        batch_size=s.batch_size,
        seed=s.seed,
        eos_token_id=eos_token_id,
    )


def with_progress(
    label: str,
    total: int,
    work: Callable[[Callable[[PromptRecord], None]], RunResult],
    on_prompt: Callable[[PromptRecord], None] = lambda record: None,
) -> RunResult:
    """Run work(on_prompt_done) under a progress bar over prompts; ``on_prompt`` sees each finished prompt."""
    with Progress(transient=False) as progress:
        task = progress.add_task(label, total=total)

        def done(record: PromptRecord) -> None:
            progress.advance(task)
            on_prompt(record)

        return work(done)


def paired_comparison(cfg: Config) -> PairedComparison | None:
    """The `algorithm.compare` verifiers, the configured one first (the differences' reference), or None."""
    a = cfg.algorithm
    if not a.compare:
        return None
    verifiers = {a.name: get_verifier(a.name, a.node_rule)}
    verifiers |= {name: get_verifier(name) for name in a.compare if name != a.name}
    return PairedComparison(verifiers, a.compare_repeats, cfg.sampling.seed + 1)


def warm_up(
    target: TargetModel, drafter: Drafter, verifier: Verifier, prompt: list[int], settings: DecodeSettings
) -> None:
    """A few untimed rounds of both methods, so one-off start-up costs bias neither."""
    short = replace(settings, max_new_tokens=2 * (settings.length + 1), batch_size=1)
    decode(target, drafter, verifier, [prompt], short)
    autoregressive(target, [prompt], short)


def run(cfg: Config) -> dict[str, float]:
    """Decode the dataset speculatively (and autoregressively), track it live, print a summary.

    The MLflow run exists from the start (RUNNING) and ends FINISHED, FAILED or KILLED; with
    `resume=true` a point that already finished is skipped."""
    validate(cfg)
    for note in config_warnings(cfg):
        print(f"speculab: warning: {note}")
    point = point_id(cfg)
    if cfg.resume and (found := finished_point(cfg, point)):
        print(f"speculab: resume: {run_name(cfg)} (point {point}) already finished: {found}; skipped")
        return {}
    if not cfg.tracking.enabled:
        return decode_point(cfg, NoopTracker())
    tracked_run = start_point_run(cfg, point)
    with tracked(tracked_run):
        metrics = decode_point(cfg, tracked_run)
    print(f"speculab: {where(tracked_run)}")
    return metrics


def decode_point(cfg: Config, tracker: Tracker) -> dict[str, float]:
    """Load prompts and models, decode, and log metrics (live per prompt, then final) and artifacts."""
    prompts = load_prompts(cfg.dataset.name, cfg.dataset.num_prompts, cfg.dataset.path)
    target_spec, draft_spec = model_specs(cfg)
    tokenizer = AutoTokenizer.from_pretrained(target_spec.path)
    encoded = [encode_prompt(p, tokenizer) for p in prompts]
    settings = settings_of(cfg, tokenizer.eos_token_id)
    c = cfg.cluster
    target, draft_model = start_models(
        cfg.runtime.kind,
        target_spec,
        draft_spec,
        c.address,
        c.num_cpus,
        c.actor_cpus,
        c.draft_gpu,
        cfg.runtime.max_restarts,
    )
    verifier = get_verifier(cfg.algorithm.name, cfg.algorithm.node_rule)
    drafter = draft_model
    if get_algorithm(cfg.algorithm.name).tree_builder:  # the drafter's marginals become one tree per prompt
        drafter = TreeDrafter(draft_model, tree_builder(cfg.algorithm.tree, cfg.algorithm.budget))
    elif DRAFTERS[cfg.drafter.name].proposes == "marginals":  # one path drawn from them (token, block)
        drafter = MarginalPathDrafter(draft_model, torch.Generator())
    warm_up(target, drafter, verifier, encoded[0], settings)
    paired = paired_comparison(cfg)
    finished: list[PromptRecord] = []

    def log_prompt(record: PromptRecord) -> None:
        finished.append(record)
        tracker.log_metrics(prompt_metrics(record), step=len(finished))

    with runtime_metrics(target, draft_model) as measured:
        spec = with_progress(
            run_name(cfg),
            len(encoded),
            lambda done: decode(target, drafter, verifier, encoded, settings, done, paired),
            log_prompt,
        )
    baseline = None
    if cfg.baseline:
        baseline = with_progress(
            "autoregressive baseline", len(encoded), lambda done: autoregressive(target, encoded, settings, done)
        )
    hf = None
    if cfg.baseline_hf:
        print("speculab: transformers generate baseline on the same target and prompts")
        result = target.hf_generate(encoded, settings)
        hf = hf_metrics(result.tokens, result.wall_s, result.cpu_s)
    metrics = print_summary(run_name(cfg), spec, baseline, hf) | measured
    if paired:
        compared = paired_metrics(paired.units(), cfg.algorithm.name)
        Console().print(paired_table(compared, cfg.algorithm.name, paired.repeats))
        metrics |= compared | {"time_paired_s": spec.paired_s}
    tracker.log_metrics(mlflow_metrics(metrics))
    if baseline:
        tracker.log_metrics(baseline_metrics(summarize(baseline)))
    if hf:
        tracker.log_metrics(baseline_metrics(hf, HF_PREFIX))
    tracker.set_tags({NOTE_TAG: point_description(cfg, metrics)})
    texts = [cast(str, tokenizer.decode(p.tokens)) for p in spec.prompts]  # one sequence decodes to a str
    records = prompt_records(spec, [p.id for p in prompts], texts)
    tracker.log_text(records_jsonl(records), "records.jsonl")
    tracker.log_table(records_table(records), "records_table.json")
    tracker.log_figure(acceptance_figure(spec), "acceptance_histogram.png")
    tracker.log_figure(time_split_figure(metrics), "time_split.png")
    plt.close("all")  # a sweep runs many points in this process
    return metrics
