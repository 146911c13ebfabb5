"""Model backends behind two roles: `TreeTarget` (scores draft trees) and `IIDDrafter`.

Backends: `hf` (transformers, tree attention, KV compaction; `tp_size` > 1 loads this
rank's DeepSpeed AutoTP shard, `models.tp`) and `toy` (analytic bigram tables). The roles are plain classes; `speculab.runtime` wraps them in Ray actors.
"""

from speculab.models.roles import IIDDrafter, LMSpec, TreeTarget, build_lm

__all__ = ["IIDDrafter", "LMSpec", "TreeTarget", "build_lm"]
