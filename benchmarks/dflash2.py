"""DFlash against DFlash2 on the tiny pair, by block size, temperature and draft shape, in one Markdown table.

    PYTHONPATH=platform python benchmarks/dflash2.py [--lengths 3 4 7] [--budgets 16 64 256] [--prompts 12]
        [--max-new-tokens 48] [--out dflash2.md] [override ...]

Two `speculab -m` sweeps on `model=tiny-pycode_dflash` (its preset names both drafters' checkpoints), each
over `drafter=dflash,dflash2` x `algorithm.L` (block size L + 1) x T = 0, 1 with `sweep.contrast=drafter`:
the chain (`algorithm=token`: the draft's own path, drawn from its law at T = 1, its argmax or the
selector's best path at T = 0) and DDTree at each budget. Each sweep's contrasts pair DFlash2 with DFlash
on the same prompts at every other setting, in the sweep's one family (Holm); its intervals are the
platform's (an acceptance figure's over prompts, a speedup's over units). The selector's share of
DFlash2's draft a round is `benchmarks/selector.py`'s measurement at each L (batch 1, context 512).
Runs inline on this machine's CPU, one torch thread; extra overrides go to both sweeps.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from mlflow.tracking import MlflowClient
from selector import measure

from speculab.config import resolve_path
from speculab.models.dflash import DFlash2LM, load_dflash_lm
from speculab.results.names import FIGURES_ARTIFACT, parse
from speculab.results.sweep import figure_text

DRAFTERS = ("dflash", "dflash2")
FIGURES = ("acceptance_length", "block_efficiency", "speedup_vs_ar")


@dataclass(frozen=True)
class Row:
    """One point of either sweep, as the table shows it."""

    drafter: str
    budget: int  # DDTree's; 0: the chain
    L: int
    T: float
    figures: dict[str, str]  # figure -> "value [low, high]"

    @property
    def shape(self) -> str:
        return f"DDTree B = {self.budget}" if self.budget else "chain"


def sweep(shape: list[str], args: argparse.Namespace, where: Path) -> None:
    """One `speculab -m` over the drafters, lengths and temperatures with the shape's overrides."""
    command = [
        sys.executable,
        "-m",
        "speculab.launch.cli",
        "-m",
        "model=tiny-pycode_dflash",
        f"drafter={','.join(DRAFTERS)}",
        *shape,
        f"algorithm.L={','.join(map(str, args.lengths))}",
        "sampling.temperature=0,1",
        "sweep.contrast=drafter",
        "runtime=inline",
        f"dataset.num_prompts={args.prompts}",
        f"sampling.max_new_tokens={args.max_new_tokens}",
        "measure.repeats=1",
        "baseline_hf=false",
        f"tracking.uri=sqlite:///{where / 'mlflow.db'}",
        f"hydra.sweep.dir={where / shape[0].replace('=', '_')}",
        *args.overrides,
    ]
    print("$", " ".join(command[2:]), flush=True)
    subprocess.run(command, cwd=where, check=True)


def shown(logged: dict[str, float]) -> dict[str, str]:
    """FIGURES of a run's `figures.json` (`flatten`'s output, read back by `parse`) as the sweep's table writes
    them, "-" where absent."""
    figures = parse(logged)
    return {key: figure_text(key, figures[key]) if key in figures else "-" for key in FIGURES}


def rows_and_contrasts(uri: str) -> tuple[list[Row], list[str]]:
    """The point runs of both sweeps (their figures whole, intervals included: `figures.json`; the metrics
    keep the values), and each parent's contrasts (`sweep_contrasts.md`) as it wrote them."""
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("speculab")
    assert experiment is not None, f"no experiment 'speculab' in {uri}"
    rows, contrasts = [], []
    for run in client.search_runs([experiment.experiment_id]):
        params, kind = run.data.params, run.data.tags.get("speculab.kind")
        if kind == "point":
            tree = params["algorithm.name"] == "ddtree"
            logged = json.loads(Path(client.download_artifacts(run.info.run_id, FIGURES_ARTIFACT)).read_text())
            rows.append(
                Row(
                    params["drafter.name"],
                    int(params["algorithm.budget"]) if tree else 0,
                    int(params["algorithm.L"]),
                    float(params["sampling.temperature"]),
                    shown(logged),
                )
            )
        elif kind == "sweep":
            local = Path(client.download_artifacts(run.info.run_id, "sweep_contrasts.md"))
            contrasts += [f"`{params['sweep.overrides']}`:", "", local.read_text()]
    return rows, contrasts


def selector_shares(lengths: list[int]) -> dict[int, str]:
    """L -> the selector's share of DFlash2's draft a round, batch 1 (`benchmarks/selector.py`)."""
    lm = load_dflash_lm(resolve_path("assets/tiny-pycode/dflash2"), resolve_path("assets/tiny-pycode/target"))
    assert isinstance(lm, DFlash2LM)
    shares = {}
    for L in lengths:
        marginals, law = measure(lm, 1, 512, 20, L)
        shares[L] = f"{(law - marginals) / law:.0%}"
    return shares


def table(rows: list[Row], shares: dict[int, str]) -> list[str]:
    lines = [
        "| T | block size | shape | drafter | acceptance length | tokens a round | speedup_vs_ar | selector share |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(rows, key=lambda r: (r.T, r.L, r.budget, r.drafter)):  # the chain, then trees by budget
        share = shares.get(r.L, "-") if r.drafter == "dflash2" else ""
        figures = [r.figures[name] for name in FIGURES]
        lines.append(f"| {r.T:g} | {r.L + 1} | {r.shape} | {r.drafter} | {' | '.join(figures)} | {share} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[3, 4, 7], help="L: block sizes L + 1")
    parser.add_argument("--budgets", type=int, nargs="+", default=[16, 64, 256])
    parser.add_argument("--prompts", type=int, default=12)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--out", type=Path, default=Path("dflash2.md"))
    parser.add_argument("overrides", nargs="*", help="more overrides for both sweeps")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        where = Path(scratch)
        sweep(["algorithm=token"], args, where)
        sweep(["algorithm=ddtree", f"algorithm.budget={','.join(map(str, args.budgets))}"], args, where)
        rows, contrasts = rows_and_contrasts(f"sqlite:///{where / 'mlflow.db'}")
    lines = [*table(rows, selector_shares(args.lengths)), "", *contrasts]
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"written: {args.out}")


if __name__ == "__main__":
    main()
