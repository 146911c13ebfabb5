"""The table of docs/architecture.md, drawn from `results.names`: every figure, its MLflow name, what it
means and its interval (`python -m speculab.results.names_table` prints it)."""

from __future__ import annotations

from speculab.results.names import AR_PREFIX, BASELINE_AR, BASELINE_HF, EVERY, HF_PREFIX, HIGH, LOW, SE
from speculab.stats import BOOTSTRAP_T, MEDIAN, MIN_CLUSTERS, RATIO


def names_markdown() -> str:
    """The table of docs/architecture.md: every figure, its MLflow name, what it means and its interval."""
    lines = ["| key | MLflow name | meaning |", "|---|---|---|"]
    for m in EVERY:
        beside = ""
        if m.spread == MEDIAN:
            beside = f"; beside it `{m.mlflow}{LOW}`, `{HIGH}`: the 95% {m.spread}"
        elif m.spread == BOOTSTRAP_T:
            floor = m.floor or MIN_CLUSTERS
            beside = f"; beside it `{m.mlflow}{LOW}`, `{HIGH}`: the 95% {m.spread}, from {floor} {m.over} on"
            if m.over == "prompts":
                beside += f" (below: `{m.mlflow}{SE}`, the {RATIO})"
        lines.append(f"| `{m.key}` | `{m.mlflow}` | {m.meaning}{beside} |")
    lines += [
        f"| (baseline) | `{AR_PREFIX}<key>` | the engine's autoregressive loop's {', '.join(BASELINE_AR)} |",
        f"| (baseline) | `{HF_PREFIX}<key>` | transformers' `generate` on the same target and prompts: "
        f"{', '.join(BASELINE_HF)} (its own paired speedup over the engine's loop) |",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(names_markdown())
