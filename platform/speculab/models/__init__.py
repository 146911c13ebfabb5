"""The models behind the engine's two roles: `TreeTarget` scores draft trees, `DraftModel` drafts.

`roles` holds the roles and `build_lm`, which loads a backend from an `LMSpec` inside the process
that owns it (`speculab.runtime` wraps the roles in Ray actors); `kinds` the protocols that tell
the backends apart. Backends (`LMSpec.backend`):

- `hf`: `hf.TreeLM`, a transformers causal LM decoded over trees (tree attention, position ids,
  commits that keep accepted nodes); `tp_size` > 1 loads this rank's DeepSpeed AutoTP shard (`tp`);
- `parallel`: `parallel.ParallelDraftLM`, the parallel drafter: a one-pass block drafter over a small
  causal LM, conditioned on the context only;
- `dflash`: `dflash.DFlashLM`, the DFlash drafter conditioned on the target's hidden features
  (checkpoint layouts in `dflash_layout`);
- `toy`: `toy.BigramLM`, analytic bigram tables for exact and statistical tests.

What they share: `slots.SlotCache`, the KV cache of preallocated slots written in place with
their validity, context lengths and repacking (`TreeLM` and `DFlashLM`); `lean`, decoder layers
as plain tensor functions (the target's eager and fixed-shape passes and the DFlash drafter's
layers), and `families`, which model families run on them and where each keeps its weights
(`runs_lean`: whether a loaded model does); `static_pass`, fixed-shape passes replayed from CUDA graphs;
`parallel.block_allowed`, the mask of a one-pass drafter's block (the parallel drafter's and
DFlash's); `rotary`, rotary buffers kept in float32. `memory` plans GPU memory from config.json
alone.
"""

from speculab.models.families import runs_lean
from speculab.models.roles import DraftModel, LMSpec, TreeTarget, build_lm

__all__ = ["DraftModel", "LMSpec", "TreeTarget", "build_lm", "runs_lean"]
