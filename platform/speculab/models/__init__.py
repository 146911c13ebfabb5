"""Model backends behind two roles: `TreeTarget` (scores draft trees) and `DraftModel` (proposes drafts).

Backends (`LMSpec.backend`): `hf` (transformers, tree attention, KV compaction; `tp_size` > 1
loads this rank's DeepSpeed AutoTP shard, `models.tp`), `block` (the one-pass block drafter,
`models.block`) and `toy` (analytic bigram tables). `models.memory` plans GPU memory from
config.json alone. The roles are plain classes; `speculab.runtime` wraps them in Ray actors.
"""

from speculab.models.roles import DraftModel, LMSpec, TreeTarget, build_lm

__all__ = ["DraftModel", "LMSpec", "TreeTarget", "build_lm"]
