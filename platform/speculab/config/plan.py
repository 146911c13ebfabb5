"""`resolve`: a config validated and everything derived from it fixed once, as a `RunPlan`.

The draft length, the form of generate a run times, the TP backend, where each model runs, where the decode loop
runs, how the models' passes run, the largest draft tree and the checkpoint directories are decided
here and nowhere else, so that the experiment, the runtime and the tracking read one answer from the
plan."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from speculab.config.algorithm import largest_tree
from speculab.config.checks import checked
from speculab.config.cluster import Placement, placement, resolve_device, tp_backend_for
from speculab.config.runtime import loop_host
from speculab.config.sampling import generate_form
from speculab.config.schema import Config


@dataclass(frozen=True)
class RunPlan:
    """A valid config and what a run derives from it."""

    cfg: Config  # algorithm.L, measure.generate and cluster.tp_backend set: what the run records and decodes with
    target_dir: Path
    draft_dir: Path  # the draft role's weights: the pair's draft model, or the drafter's own (drafter.path)
    target_device: str  # torch's name for it where the models run (`auto` resolved)
    draft_device: str
    loop: str  # where the decode loop runs: inline, target (beside the target, in its actor) or driver
    target_passes: str  # eager, or graphs (replayed from CUDA graphs: model.capture on a GPU)
    draft_passes: str
    largest_tree: int  # the most nodes a round's draft tree has, root included: it sizes the KV caches
    threads: int  # torch's intra-op threads in each model process (`runtime.torch_threads`, resolved)
    placement: Placement  # the Ray placement of the model groups (unused inline)


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
    draft length and checkpoints the plan keeps)."""
    cfg, found = checked(cfg)
    model = cfg.model
    target_device = resolve_device(cfg, model.device)
    # the form of generate the run times and logs (measure.generate), auto resolved by the target's device
    cfg = replace(cfg, measure=replace(cfg.measure, generate=generate_form(cfg.measure.generate, target_device)))
    backend = tp_backend_for(cfg.cluster.tp_backend, found["target"].config)  # auto resolved by the target
    cfg = replace(cfg, cluster=replace(cfg.cluster, tp_backend=backend))
    draft_device = resolve_device(cfg, model.draft_device or model.device)
    return RunPlan(
        cfg=cfg,
        target_dir=found["target"].path,
        draft_dir=found["draft"].path,
        target_device=target_device,
        draft_device=draft_device,
        loop=loop_host(cfg),
        target_passes=passes_on(target_device, model.capture),
        draft_passes=passes_on(draft_device, model.capture),
        largest_tree=largest_tree(cfg.algorithm),
        threads=model_threads(cfg),
        placement=placement(cfg),
    )
