"""The slot KV cache (`models.slots`): the same keys and values as transformers' appending cache,
written in place in buffers allocated once, and the same logits through a model's own modules."""

from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache, DynamicLayer

from speculab.models.hf import load_causal_lm
from speculab.models.slots import CAPACITY_STEP, FixedShape, SlotCache, SlotLayer, gather_slots
from support.engine import tiny_pair_batch
from support.models import TINY_PAIR

B, H, D = 3, 2, 4


def kv(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(B, H, n, D, generator=g), torch.randn(B, H, n, D, generator=g)


def test_updates_equal_appending_and_grow_only_past_capacity() -> None:
    slots, appended = SlotLayer(capacity=4), DynamicLayer()
    for step, n in enumerate((3, 1, 2, 5)):  # 3 and 1 fit in 4 slots; 2 more double it to 8, 5 more to 16
        keys, values = slots.update(*kv(n, step))
        expected = appended.update(*kv(n, step))
        assert torch.equal(keys, expected[0]) and torch.equal(values, expected[1])
        assert slots.get_seq_length() == appended.get_seq_length() == keys.shape[2]
    assert slots.buffers is not None and slots.buffers[0].shape[2] == 16
    assert slots.nbytes == 2 * B * H * 11 * D * 4  # the slots in use


def test_every_edit_stays_in_the_buffers_allocated_first() -> None:
    layer = SlotLayer(capacity=16)
    layer.update(*kv(6, 0))
    assert layer.buffers is not None
    pointers = [buffer.data_ptr() for buffer in layer.buffers]
    before = layer.keys.clone()  # type: ignore[union-attr]
    layer.update(*kv(4, 1))
    forest = torch.tensor([[3, 1], [0, 0], [2, 3]])  # per row, forest nodes (after slot 6) to keep
    layer.gather_slots(6, forest)
    assert layer.keys is not None and layer.keys.shape[2] == 8
    kept = gather_slots(kv(4, 1)[0], forest)
    assert torch.equal(layer.keys[:, :, :6], before) and torch.equal(layer.keys[:, :, 6:], kept)
    order = torch.tensor([[0, 2, 4, 6], [1, 3, 5, 7], [7, 6, 5, 4]])
    expected = gather_slots(layer.keys.clone(), order)
    layer.repack(order)
    assert torch.equal(layer.keys, expected)
    layer.keep_rows(torch.tensor([2, 0]))
    assert torch.equal(layer.keys, expected[[2, 0]])
    layer.truncate(3)
    layer.crop(-1)
    assert layer.get_seq_length() == 2 and torch.equal(layer.keys, expected[[2, 0], :, :2])
    assert [buffer.data_ptr() for buffer in layer.buffers] == pointers  # no reallocation, ever


@pytest.mark.parametrize("step_valid", [[True, True], [True, False]])
def test_keeping_every_node_in_order_commits_as_the_general_path(step_valid: list[bool]) -> None:
    """`SlotCache.commit`'s shortcut (every row keeps all its nodes, as each autoregressive step does; an
    invalid node stays invalid) leaves the cache as the general path does, which a column no row uses forces."""
    caches = [SlotCache(1, torch.device("cpu")) for _ in range(2)]
    for cache in caches:
        cache.reset(B, 16)
        cache.add(torch.tensor([[False, True, True], [True, True, True], [True, True, True]]))
        cache.layers[0].update(*kv(3, 0))
        cache.commit_all()
        cache.add(torch.tensor([*step_valid, True])[:, None])  # one node per row
        cache.layers[0].update(*kv(1, 1))
    every = torch.zeros(B, 1, dtype=torch.long)
    shortcut, general = caches
    assert torch.equal(shortcut.commit(every), every)
    assert torch.equal(general.commit(torch.cat([every, torch.full((B, 1), -1)], dim=1)), every)
    assert torch.equal(shortcut.valid, general.valid) and shortcut.committed == general.committed == 4
    assert torch.equal(shortcut.layers[0].keys, general.layers[0].keys)


@torch.inference_mode()
def test_a_model_s_own_modules_give_the_same_logits_over_slots() -> None:
    """The tiny target's transformers forward, prompt then two steps, with each cache."""
    model = load_causal_lm(TINY_PAIR / "target")
    tokens = torch.randint(0, model.config.vocab_size, (2, 9), generator=torch.Generator().manual_seed(0))
    slots = SlotCache(model.config.num_hidden_layers, torch.device("cpu"))
    slots.reset(2, capacity=4)
    caches = slots.cache, DynamicCache(config=model.config)
    logits = []
    for cache in caches:
        steps = [model(input_ids=tokens[:, :7], past_key_values=cache, use_cache=True).logits]
        for i in (7, 8):
            steps.append(model(input_ids=tokens[:, i : i + 1], past_key_values=cache, use_cache=True).logits)
        logits.append(torch.cat(steps, dim=1))
        assert cache.get_seq_length() == 9
    torch.testing.assert_close(logits[0], logits[1], rtol=0, atol=1e-5)


@pytest.mark.parametrize("drafter_kind", ["draft", "dflash"])
def test_caches_sized_from_the_workload_keep_their_first_buffers(drafter_kind: str) -> None:
    """With the room of its settings (new tokens and the largest tree), no cache of a batch grows:
    every layer ends with the capacity prefill gave it, holes repacked away instead."""
    result, target, draft_model = tiny_pair_batch("eager", drafter_kind, 1.0)
    assert len({tuple(p.accepted) for p in result.prompts}) > 1  # rows accepted differently: holes, then repacks
    room = 20 + (2 * 4 + 1 if drafter_kind == "draft" else 16 + 1)  # new tokens + the largest tree
    for lm in (target.lm, draft_model.lm):
        slots: SlotCache = lm.slots
        assert slots.capacity == 19 - 1 + room  # the widest context (a prompt but its last token) + room
        assert slots.filled() and all(buffers[0].shape[2] == slots.capacity for buffers in slots.buffers())


def test_fixed_shape_buffers_are_kept_for_every_batch_they_hold() -> None:
    """A point's batches differ in their longest prompt: the buffers (and the graphs over them) stay
    while they hold the batch, and grow in steps, never per batch."""
    cache = SlotCache(2, torch.device("cpu"), FixedShape(kv_heads=2, head_dim=4, dtype=torch.float32))
    cache.reset(3, 100)
    first = cache.fixed_buffers
    assert first[0][0].shape == (3, 2, CAPACITY_STEP, 4) and cache.capacity == CAPACITY_STEP
    cache.reset(3, CAPACITY_STEP)  # a longer batch that still fits
    assert cache.fixed_buffers is first and cache.layers[1].buffers == first[1]
    cache.reset(3, CAPACITY_STEP + 1)
    assert cache.fixed_buffers[0][0].shape[2] == 2 * CAPACITY_STEP and cache.capacity == 2 * CAPACITY_STEP
    cache.reset(2, 10)  # another batch size: new buffers
    assert cache.fixed_buffers[0][0].shape == (2, 2, CAPACITY_STEP, 4)
