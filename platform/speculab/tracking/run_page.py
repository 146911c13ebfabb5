"""What a point's MLflow page holds beyond its metrics: its description (the configuration in words,
then its headline figures) and its per-prompt records (JSONL and the table the UI shows); its plots are
`show.plots`'."""

from __future__ import annotations

import json
from typing import Any

from speculab.core.records import RunResult
from speculab.process.jobs import ReplicaLost
from speculab.registry import get_algorithm
from speculab.results.names import HEADLINE
from speculab.results.point import PointResult, PointShape
from speculab.results.profile import PROFILE_ARTIFACT
from speculab.results.verdicts import Call, run_verdicts
from speculab.show.answers import call_words, with_level
from speculab.show.requests import FILE as REQUESTS_FIGURE
from speculab.stats import ratio_text
from speculab.tracking.spool import NOTE_TAG


def headline_line(result: PointResult) -> str:
    """A finished point's headline figures on one line, each with its interval where it has one, and each
    speedup with its verdict (`results.verdicts.run_verdicts`), beside the interval its test was judged
    at: what its page opens on."""
    verdicts = run_verdicts(result)
    parts = []
    for key in (k for k in HEADLINE if k in result.figures):
        figure, verdict = result.figures[key], verdicts.get(key)
        if verdict is not None and verdict.call is not Call.TOO_FEW:
            shown = f"{with_level(verdict)}, {call_words(verdict)}"
        else:
            shown = ratio_text(figure) if "speedup" in key else f"{figure:.4g}"
        parts.append(f"{key.replace('_', ' ')} {shown}")
    family = next(iter(verdicts.values())).family if verdicts else None
    tested = f" · verdicts: {family}" if family is not None and family.tests else ""
    return (f"**{parts[0]}** · " + " · ".join(parts[1:]) + tested) if parts else ""


def headline_tag(result: PointResult) -> str:
    """A finished point's `speedup_vs_ar` with its 95% interval, short enough for a tag's chip on its page
    (`tracking.spool.HEADLINE_TAG`); where the autoregressive baseline did not run, says so."""
    if "speedup_vs_ar" not in result.figures:
        return "none: baseline=false"
    return ratio_text(result.figures["speedup_vs_ar"])


SWEEP_SECTION = "In the sweep:"  # how the paragraph of its sweep's verdicts opens, in a point's description


def with_sweep_section(description: str, section: str) -> str:
    """A point's description opening on its sweep's verdicts (`section`), then its own headline, in place of
    any such paragraph an earlier launch of the sweep wrote: MLflow shows a description's first three lines
    until "Show more", and the sweep's verdicts are the ones the point is read by."""
    kept = [part for part in description.split("\n\n") if part and not part.startswith(SWEEP_SECTION)]
    return "\n\n".join([section, *kept])


DECODING = "\n\nDecoding…"  # what a running point's description ends with


def point_description(shape: PointShape, runtime: str, result: PointResult | None = None) -> str:
    """A run's markdown description: when done, its headline figures first (MLflow shows a description's
    first lines only), then its shape in words."""
    spec = get_algorithm(shape.algorithm)
    rule = f", node rule `{shape.node_rule}`" if shape.node_rule is not None else ""
    paths = shape.K or 1
    lossy = "" if spec.lossless(paths) else f" **Not lossless** at K={paths} (`algorithm.allow_lossy=true`)."
    text = (
        f"**{shape.algorithm}** verification ({spec.paper}{rule}) of {shape.drafted} from drafter `{shape.drafter}`, "
        f"temperature {shape.temperature}, on {shape.prompt_count} `{shape.dataset}` prompts × {shape.max_new_tokens} "
        f"new tokens (batch {shape.batch_size}), model pair `{shape.model}`, runtime `{runtime}`.{lossy}"
    )
    if result is None:
        return text + DECODING
    return "\n\n".join(filter(None, (headline_line(result), acceptance_line(result), text)))


def acceptance_line(result: PointResult) -> str:
    """The acceptance length both ways, where the point drafted: per step (every round pooled) and the mean of
    its prompts' own, with where the prompts' spread and the profile are ("" for a point that drafted nothing)."""
    figures = result.figures
    if "acceptance_length_per_request" not in figures:
        return ""
    step, request = figures["acceptance_length"], figures["acceptance_length_per_request"]
    return (
        f"Acceptance length {step:.3f} per step (every round pooled), {request:.3f} per request (the mean of its "
        f"{request.n} prompts' own): their spread in `{REQUESTS_FIGURE}`, the profile in `{PROFILE_ARTIFACT}`."
    )


REPLICA_LOST_TAG = "speculab.replica_lost"  # a lost replica's attempt at a point, run again on another


def ended_tags(shape: PointShape, runtime: str, status: str, err: BaseException | None) -> dict[str, str]:
    """A point's description (and tag) when its run ends other than FINISHED: what happened instead of
    "Decoding…", first, so that MLflow's first lines say it."""
    why = " ".join(str(err).split()) if err is not None else ""
    if isinstance(err, ReplicaLost):
        said = (
            f"**Replica {err.replica + 1} lost**: {why}. The point ran again from its first unit on another "
            "replica, in a run of its own under the sweep's parent; this attempt's figures are not the point's."
        )
        tags = {REPLICA_LOST_TAG: str(err.replica + 1)}
    elif status == "KILLED" or isinstance(err, KeyboardInterrupt):
        said, tags = "**Interrupted** (Ctrl-C or SIGTERM): its finished units are logged; `resume=true` reruns it.", {}
    else:
        said, tags = f"**Failed**: {why or status}; the units it finished are logged.", {}
    return tags | {NOTE_TAG: f"{said}\n\n{point_description(shape, runtime).removesuffix(DECODING)}"}


def prompt_records(run: RunResult, prompt_ids: list[str], texts: list[str]) -> list[dict[str, Any]]:
    """One record per prompt: id, token counts, tau per round, stop reason, generated tokens and text."""
    return [
        {
            "id": prompt_ids[p.index],
            "prompt_tokens": p.prompt_tokens,
            "generated_tokens": len(p.tokens),
            "rounds": len(p.accepted),
            "accepted": p.accepted,
            "stop": p.stop,
            "tokens": p.tokens,
            "text": texts[p.index],
        }
        for p in run.prompts
    ]


def records_jsonl(records: list[dict[str, Any]]) -> str:
    """records.jsonl: one JSON object per prompt, token ids included."""
    return "".join(json.dumps(record) + "\n" for record in records)


TABLE_COLUMNS = ("id", "text", "accepted", "stop", "generated_tokens", "rounds", "prompt_tokens")


def records_table(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of the table the MLflow UI shows, text first (it is the widest): tau per round as
    space-separated numbers, no token ids."""
    return [
        {key: " ".join(map(str, r[key])) if key == "accepted" else r[key] for key in TABLE_COLUMNS} for r in records
    ]
