"""DFlash over Ray: the target actor's features reach the draft actor as an ObjectRef the driver
passes on unread, and the run equals the inline one token for token."""

from __future__ import annotations

import pytest

from speculab.core.autoregressive import autoregressive
from speculab.core.engine import decode
from speculab.drafting.ddtree import TreeDrafter, tree_builder
from speculab.models import DraftModel, LMSpec, TreeTarget
from speculab.runtime import start_models
from speculab.verify.ddtree_walk import ddtree_walk
from support.engine import PROMPTS, settings
from support.models import save_random_dflash

LAYER_IDS = (0, 2)


@pytest.mark.slow
@pytest.mark.usefixtures("ray_pool")
def test_dflash_features_cross_from_the_target_actor_to_the_draft_actor(random_llama_pair, tmp_path) -> None:
    import ray

    target_path = str(random_llama_pair[0])
    draft_path = str(save_random_dflash(tmp_path / "dflash", random_llama_pair[0], list(LAYER_IDS), seed=3))
    target_spec = LMSpec("hf", target_path, feature_layers=LAYER_IDS)
    draft_spec = LMSpec("dflash", draft_path, target_path=target_path)
    s = settings(K=1, L=5, batch=2, max_new=16)
    inline_target = TreeTarget(target_spec)
    inline = decode(
        inline_target, TreeDrafter(DraftModel(draft_spec), tree_builder("best_first", 16)), ddtree_walk, PROMPTS, s
    )
    target, source = start_models("ray", target_spec, draft_spec)
    assert isinstance(target.prefill([[1, 2, 3]]), ray.ObjectRef)  # the driver holds a reference only
    run = decode(target, TreeDrafter(source, tree_builder("best_first", 16)), ddtree_walk, PROMPTS, s)
    assert [p.tokens for p in run.prompts] == [p.tokens for p in inline.prompts]
    assert [p.tokens for p in run.prompts] == [p.tokens for p in autoregressive(inline_target, PROMPTS, s).prompts]
    assert [r.feature_bytes for r in run.rounds] == [r.feature_bytes for r in inline.rounds]
    assert sum(r.feature_bytes for r in run.rounds) > 0
