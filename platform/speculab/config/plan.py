"""`resolve`: a config validated and everything derived from it fixed once, as a `RunPlan`.

The draft length, the form of generate a run times, the TP backend, where each model runs, where the decode loop
runs and where the draft lives, how the models' passes run, the largest draft tree, the planned memory and
the checkpoint directories are decided here and nowhere else, so that the experiment, the runtime and the
tracking read one answer from the plan (`plan_lines`: what `speculab --plan` prints of it)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from speculab.config.algorithm import largest_tree
from speculab.config.checks import checked
from speculab.config.cluster import Placement, placement, resolve_device
from speculab.config.pair import digest, pair_name
from speculab.config.runtime import loop_host
from speculab.config.sampling import generate_form
from speculab.config.schema import Config

if TYPE_CHECKING:
    from speculab.models.memory import MemoryFootprint


@dataclass(frozen=True)
class RunPlan:
    """A valid config and what a run derives from it."""

    cfg: Config  # algorithm.L, measure.generate, cluster.tp_backend and cluster.draft_placement set: what the run
    # records and decodes with
    target_dir: Path
    draft_dir: Path  # the draft role's weights: the pair's draft model, or the drafter's own (drafter.path)
    target_digest: str  # what the checkpoints hold, in 12 hex digits (`config.pair.digest`)
    draft_digest: str
    preset_name: str  # the `model.name` the config gave, where `cfg.model.name` is the pair's own instead
    target_device: str  # torch's name for it where the models run (`auto` resolved)
    draft_device: str
    loop: str  # where the decode loop runs: inline, target (beside the target, in its actor) or driver
    target_passes: str  # eager, or graphs (replayed from CUDA graphs: model.capture on a GPU)
    draft_passes: str
    verifier_passes: str  # eager, or graphs: a path verifier's decision replayed (model.capture_verifier)
    largest_tree: int  # the most nodes a round's draft tree has, root included: it sizes the KV caches
    threads: int  # torch's intra-op threads in each model process (`runtime.torch_threads`, resolved)
    placement: Placement  # the Ray placement of the model groups (unused inline)
    footprint: MemoryFootprint | None  # planned bytes per GPU (or host process); None: an architecture unknown


def passes_on(device: str, capture: bool) -> str:
    """A transformers model's passes on `device` (`models.hf.TreeLM`): replayed from CUDA graphs when
    capture is on and the device is a GPU, else eager."""
    return "graphs" if capture and device.startswith("cuda") else "eager"


def model_threads(cfg: Config) -> int:
    """`runtime.torch_threads`, or where it is 0 the CPUs one model actor reserves (at least 1): what a
    Ray actor gets by default, so that a point measures the same inline and on Ray (the threads move
    the answer: benchmarks/RESULTS.md)."""
    return cfg.runtime.torch_threads or max(1, int(cfg.cluster.actor_cpus))


def resolve(cfg: Config) -> RunPlan:
    """The run's plan; ConfigError listing every invalid field first (`config.checks.checked`, whose
    draft length, checkpoints and cluster plan the plan keeps)."""
    cfg, found, cluster = checked(cfg)
    # the pair is named after what it loads, not after a preset whose checkpoints it does not load
    given = cfg.model.name
    cfg = replace(cfg, model=replace(cfg.model, name=pair_name(cfg.model, found["target"], found["draft"])))
    model = cfg.model
    target_device = resolve_device(cfg, model.device)
    # the form of generate the run times and logs (measure.generate), auto resolved by the target's device
    cfg = replace(cfg, measure=replace(cfg.measure, generate=generate_form(cfg.measure.generate, target_device)))
    # the TP backend (auto resolved by the target) and where the draft lives (auto resolved by the loop's
    # place): the run's params say what it ran with
    resolved = replace(cfg.cluster, tp_backend=cluster.tp_backend, draft_placement=cluster.draft_placement)
    cfg = replace(cfg, cluster=resolved)
    draft_device = resolve_device(cfg, model.draft_device or model.device)
    return RunPlan(
        cfg=cfg,
        target_dir=found["target"].path,
        draft_dir=found["draft"].path,
        target_digest=digest(found["target"].path),
        draft_digest=digest(found["draft"].path),
        preset_name=given if given != model.name else "",
        target_device=target_device,
        draft_device=draft_device,
        loop=loop_host(cfg),
        target_passes=passes_on(target_device, model.capture),
        draft_passes=passes_on(draft_device, model.capture),
        verifier_passes=passes_on(target_device, model.capture and model.capture_verifier),
        largest_tree=largest_tree(cfg.algorithm),
        threads=model_threads(cfg),
        placement=placement(cfg),
        footprint=cluster.footprint,
    )


PASS_WORDS = {"graphs": "replayed from CUDA graphs", "eager": "eager"}


def pass_line(plan: RunPlan) -> str:
    """How the models' passes and the verifier's decision run (model.capture, model.compile,
    model.capture_verifier, as the devices allow them)."""
    compiled = " with inductor-compiled layers" if plan.cfg.model.compile else ""
    return (
        f"target {PASS_WORDS[plan.target_passes]}{compiled}, draft {PASS_WORDS[plan.draft_passes]}"
        f"{compiled if plan.draft_passes == 'graphs' else ''}, verifier {PASS_WORDS[plan.verifier_passes]}"
    )


LOOP_WHERE = {
    "inline": "in this process, with both models (runtime=inline)",
    "target": "on rank 0 of the target's group, no Ray call a round (runtime.loop=target)",
    "driver": "in this process, calling the model actors every round (runtime.loop=driver)",
}


def plan_lines(plan: RunPlan) -> list[str]:
    """What `speculab --plan` prints: where each model and the loop run, and every figure of the memory
    plan against the GPUs (or the host) it is checked on."""
    from speculab.models.memory import DRAFT_WHERE, GIB, gpu_figures, host_figures

    cfg, c = plan.cfg, plan.cfg.cluster
    split = f", tensor-parallel over {c.tp_size} ranks ({c.tp_backend})" if c.tp_size > 1 else ""
    draft = {
        "own": "in an actor of its own" + (f" ({c.draft_gpu:g} of a GPU)" if plan.draft_device == "cuda" else ""),
        "beside": "whole, in the loop's process",
        "sharded": f"sharded with the target over the same {c.tp_size} ranks",
    }[c.draft_placement]
    if plan.loop == "target" and c.draft_placement == "own":
        draft += ", which rank 0 drives over a socket"
    d = cfg.drafter
    lines = [
        f"target  {plan.target_dir} ({plan.target_device}, {cfg.model.dtype}){split}",
        f"draft   {plan.draft_dir} ({plan.draft_device}), {draft} (cluster.draft_placement={c.draft_placement})",
        *(
            [f"ahead   {d.ahead_budget} guesses a row, {d.ahead_fan_out} fan-out (drafter.ahead={d.ahead})"]
            if d.ahead != "off"
            else []
        ),
        f"loop    {LOOP_WHERE[plan.loop]}",
        f"passes  {pass_line(plan)}",
    ]
    f = plan.footprint
    if f is None:
        return [*lines, "memory  not planned: the planner does not know this architecture (models.memory)"]
    if plan.target_device.startswith("cuda") and c.num_gpus > 0:
        verdict = "fits" if f.busiest_gpu <= c.gpu_memory_gib * GIB else "does not fit"
        return [
            *lines,
            f"GPUs    {f.gpus} of cluster.num_gpus={c.num_gpus}, the draft {DRAFT_WHERE[f.draft_place]}",
            f"memory  {gpu_figures(f)}: {verdict} cluster.gpu_memory_gib={c.gpu_memory_gib:g}",
        ]
    needed, figures = host_figures(f)
    return [*lines, f"memory  {needed / GIB:.1f} GiB of host memory: {figures}"]
