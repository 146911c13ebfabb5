"""Where a GPU pass and a GPU round spend their time, for the next step after benchmarks/gpu_systems.py:

    python tools/gpu_profile.py kernels   # top kernels of one eager target pass (8B shapes) at 1 and 257 nodes
    python tools/gpu_profile.py syncs     # the source lines of a DDTree round's host synchronisations

`kernels` runs torch.profiler over one pass after a warm-up (eager: a CUDA graph replays these same
kernels) and prints the kernels by total device time. `syncs` decodes the tiny pair with DDTree on
the DFlash drafter (captured passes, T = 0) under torch's sync debug mode and counts the warnings
per source line of this repository, per round. Without a GPU both run at CPU-sized shapes.
"""

from __future__ import annotations

import argparse
import collections
import sys
import warnings
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from gpu_systems import ARCHS, random_model, random_tree  # noqa: E402

from speculab.device.syncs import SYNC_WARNING  # noqa: E402
from speculab.models import LMSpec, TreeTarget  # noqa: E402


def kernels(device: str, top: int) -> None:
    """The `top` kernels of one eager pass over 1 and 257 nodes after 1024 context tokens."""
    small = device == "cpu"
    shape, _, vocab = ARCHS["small" if small else "llama"]
    dtype = torch.float32 if small else torch.bfloat16
    model = random_model("llama", shape, vocab, dtype, device, seed=1)
    target = TreeTarget(LMSpec("hf", model=model, device=device, passes="eager"))
    gen = torch.Generator().manual_seed(0)
    target.prefill([torch.randint(0, vocab, (128 if small else 1024,), generator=gen).tolist()], room=300)
    none_kept = torch.empty(1, 0, dtype=torch.long, device=device)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    for nodes in (1, 257):
        tree = random_tree(nodes, vocab, gen, device)
        for _ in range(2):  # warm-up
            target.lm.extend(tree)
            target.lm.commit(none_kept)
        with profile(activities=activities) as prof:
            target.lm.extend(tree)
            target.lm.commit(none_kept)
            if device == "cuda":
                torch.cuda.synchronize()
        sort = "self_cuda_time_total" if device == "cuda" else "self_cpu_time_total"
        print(f"== one eager pass over {nodes} node(s), {dtype}, {shape}")
        print(prof.key_averages().table(sort_by=sort, row_limit=top, max_name_column_width=70), flush=True)


def syncs(device: str, rounds_shown: int) -> None:
    """Host synchronisations of a DDTree round on the tiny pair, by source line."""
    sys.path.insert(0, str(REPO / "tests"))
    from support.engine import tiny_pair_batch

    tiny_pair_batch("graphs" if device == "cuda" else "static", "dflash", 0.0, device=device)  # capture first
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if device == "cuda":
            torch.cuda.set_sync_debug_mode("warn")
        run = tiny_pair_batch("graphs" if device == "cuda" else "static", "dflash", 0.0, device=device)[0]
        if device == "cuda":
            torch.cuda.set_sync_debug_mode(0)
    sites = collections.Counter(
        f"{Path(w.filename).relative_to(REPO) if w.filename.startswith(str(REPO)) else w.filename}:{w.lineno}"
        for w in caught
        if SYNC_WARNING in str(w.message)
    )
    rounds, total = max(len(run.rounds), 1), sum(sites.values())
    print(f"{total} host synchronisations over {rounds} rounds ({total / rounds:.1f} a round)")
    for site, count in sites.most_common(rounds_shown):
        print(f"{count / rounds:6.2f} a round  {site}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("kernels", "syncs"))
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    with torch.inference_mode():
        (kernels if args.what == "kernels" else syncs)(device, args.top)


if __name__ == "__main__":
    main()
