"""A racing sweep's stages (`hydra/sweeper=race`, `hydra_plugins.speculab_racing`): each stage's points
launched through the sweep's launcher as one batch, on a slice of one seeded sample of prompts
(`dataset.slice`, fresh at every stage), the points a stage rules out dropped before the next
(`results.race.ruled_out`), and the stages written to the sweep's directory as they end (`race.json`),
where the sweep's parent run reads them and pools each point left over its stages (`results.race.pooled`).
Why it keeps the sweep's 5%: `speculab.results.race`."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from hydra.core.utils import JobReturn, JobStatus
from hydra.plugins.launcher import Launcher
from omegaconf import DictConfig

from speculab.config.answer import stage_bounds, stage_jobs
from speculab.point.experiment import PointOutcome
from speculab.results.point import PointResult
from speculab.results.race import Stage, race_name, ruled_out, stage_share, write_race


def finished(jobs: Sequence[JobReturn]) -> list[PointResult | None]:
    """Each job's point as it finished (None: failed, or lost with every replica)."""
    found: list[PointResult | None] = []
    for job in jobs:
        value = job.return_value if job.status == JobStatus.COMPLETED else None
        found.append(value.result if isinstance(value, PointOutcome) else None)
    return found


def race(
    launcher: Launcher, config: DictConfig, points: list[list[str]], stages: Sequence[int]
) -> list[Sequence[JobReturn]]:
    """Run the race: every point on the first stage's prompts, then, stage after stage, the points still in
    the running on the next stage's; returns each stage's job returns, as Hydra's sweepers do."""
    sweep_dir = Path(str(config.hydra.sweep.dir))
    share = stage_share(len(stages), len(points), bool(config.baseline or config.baseline_hf))
    running, history, returns, number = points, [], [], 0
    for at, (start, stop) in enumerate(stage_bounds(stages), start=1):
        jobs = launcher.launch(stage_jobs(running, start, stop, stages[-1]), initial_job_idx=number)
        number += len(jobs)
        returns.append(jobs)
        results = finished(jobs)
        kept = [(p, r) for p, r in zip(running, results) if r is not None]
        stage = Stage(at, start, stop, [race_name(r) for _, r in kept])
        if at < len(stages) and len(kept) > 1:
            leader, out = ruled_out([r for _, r in kept], len(points), share)
            dropped = {id(r) for r, _ in out}
            stage = Stage(at, start, stop, stage.points, race_name(leader), [o for _, o in out])
            kept = [(p, r) for p, r in kept if id(r) not in dropped]
        history.append(stage)
        write_race(sweep_dir, history)
        running = [list(p) for p, _ in kept]
    return returns
