"""How far a point's speed figure moves on a busy machine: the same point run several times.

    PYTHONPATH=platform python benchmarks/spread.py [--runs 2] [--repeats 1 3 5] [--prompts 8 32]
        [--max-new-tokens 64] [--hog-processes 2] [--quiet-machine] [--overrides algorithm=gbv ...]

While it runs, `--hog-processes` CPU-bound processes switch on and off at random (1 to 4 s
each way), so the load changes between and within a point's phases as it does on a shared
machine. Each run of the point is measured two ways on the same models and prompts:

- sequential (the protocol speculab used before): every prompt decoded speculatively, then
  every prompt autoregressively, once; speedup = the ratio of the two throughputs;
- interleaved (`speculab.point.experiment.decode_point`, `measure.repeats=R`): each prompt by both
  methods back to back in rotating order, R times, the median of paired ratios with its 95%
  bootstrap interval over prompts (docs/measuring.md).

Prints, per prompt count, protocol and R, every run's speedup_vs_ar (with its interval where
there is one), the spread between runs, and whether each interleaved run's median lies inside
every run's interval. Inline runtime, one torch thread, transformers' generate off (baseline_hf),
tracking off.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from rich.console import Console
from rich.table import Table

import speculab.launch.cli  # noqa: F401  registers the structured schema
from speculab.config import PROJECT_ROOT, Config, resolve
from speculab.core.autoregressive import autoregressive
from speculab.core.engine import decode
from speculab.data import encode_prompt, load_prompts
from speculab.models import DraftModel, TreeTarget
from speculab.point.experiment import model_specs, settings_of
from speculab.registry import get_verifier
from speculab.results.figures import tokens_per_second

HOG = """
import random, time
while True:
    end = time.time() + random.uniform(1, 4)
    while time.time() < end:
        pass
    time.sleep(random.uniform(1, 4))
"""


@contextmanager
def hogs(count: int) -> Iterator[None]:
    """`count` processes that burn a core for 1-4 s, then rest 1-4 s, until the block ends."""
    procs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(count)]
    try:
        yield
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def point(overrides: list[str]) -> Config:
    with initialize_config_dir(config_dir=str(PROJECT_ROOT / "conf"), version_base="1.3"):
        composed = compose("config", overrides=overrides)
    cfg = OmegaConf.to_object(composed)
    assert isinstance(cfg, Config)
    return cfg


def sequential(cfg: Config) -> float:
    """The former protocol: all prompts speculatively, then all autoregressively, once each."""
    plan = resolve(cfg)
    target_spec, draft_spec = model_specs(plan)
    target, drafter = TreeTarget(target_spec), DraftModel(draft_spec)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(target_spec.path)
    prompts = [encode_prompt(p, tokenizer) for p in load_prompts(cfg.dataset.name, cfg.dataset.num_prompts)]
    settings = settings_of(plan, tokenizer.eos_token_id)
    verifier = get_verifier(cfg.algorithm.name)
    decode(target, drafter, verifier, prompts[:1], settings)  # the same warm-up as before: untimed
    autoregressive(target, prompts[:1], settings)
    spec = decode(target, drafter, verifier, prompts, settings)
    ar = autoregressive(target, prompts, settings)
    return tokens_per_second(spec) / tokens_per_second(ar)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--repeats", type=int, nargs="+", default=[1, 3, 5])
    parser.add_argument("--prompts", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--hog-processes", type=int, default=2)
    parser.add_argument("--quiet-machine", action="store_true", help="no hog processes")
    parser.add_argument("--overrides", nargs="*", default=["algorithm=block", "algorithm.L=4"])
    args = parser.parse_args()
    base = [
        *args.overrides,
        "runtime=inline",
        "runtime.torch_threads=1",
        "tracking=none",
        "baseline_hf=false",
        f"sampling.max_new_tokens={args.max_new_tokens}",
    ]
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    random.seed(0)
    results: dict[str, list[tuple[float, float, float]]] = {}
    start = time.time()
    with hogs(0 if args.quiet_machine else args.hog_processes):
        for run in range(args.runs):
            for prompts in args.prompts:
                point_args = [*base, f"dataset.num_prompts={prompts}"]
                found = (sequential(point(point_args)), math.nan, math.nan)
                results.setdefault(f"{prompts} prompts, sequential", []).append(found)
                for repeats in args.repeats:
                    result = run(point([*point_args, f"measure.repeats={repeats}"])).result
                    speedup = result.figures["speedup_vs_ar"]
                    found = (speedup.value, speedup.low, speedup.high)
                    results.setdefault(f"{prompts} prompts, interleaved R={repeats}", []).append(found)
            print(f"run {run + 1}/{args.runs} done after {time.time() - start:.0f} s", flush=True)
    table = Table(title=f"speedup_vs_ar of one point ({' '.join(args.overrides)}), {args.runs} runs")
    for column in ("protocol", "runs: median [95% interval]", "max/min across runs", "interval width", "agree"):
        table.add_column(column, justify="left" if column == "protocol" else "right")
    for protocol, found in results.items():
        medians = [m for m, _, _ in found]
        intervals = not math.isnan(found[0][1])
        cells = [f"{m:.3f}" + (f" [{lo:.3f}, {hi:.3f}]" if intervals else "") for m, lo, hi in found]
        width = f"{statistics.median(hi - lo for _, lo, hi in found):.3f}" if intervals else ""
        agree = all(lo <= m <= hi for m in medians for _, lo, hi in found)  # one's own median lies in its own
        table.add_row(
            protocol,
            "; ".join(cells),
            f"{max(medians) / min(medians):.3f}",
            width,
            ("each median inside every run's interval" if agree else "no") if intervals else "",
        )
    Console(width=200).print(table)
    load = "a quiet machine" if args.quiet_machine else f"{args.hog_processes} on/off CPU hog process(es)"
    print(f"HumanEval prompts x {args.max_new_tokens} tokens, inline, 1 torch thread, {load}")


if __name__ == "__main__":
    main()
