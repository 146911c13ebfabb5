"""The draft role's checkpoint against its drafter: the draft length a drafter's block implies (a
parallel drafter's block.json, a DFlash config.json's block_size - 1), a parallel drafter's block
size, and a DFlash or DFlash2 drafter's layout against its target; a DFlash checkpoint given to
another drafter, and each of DFlash's kinds to the other's drafter. Reads config files only, never
weights (`speculab.models.dflash_layout` imports no torch)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from speculab.config.algorithm import DrafterConfig, draft_length
from speculab.config.checkpoints import PROJECT_ROOT, Checkpoint, read_json
from speculab.config.model import ModelView

if TYPE_CHECKING:
    from speculab.registry import DrafterSpec


def _block_of(path: Path, block_file: str) -> int | None:
    """The drafts one pass of the drafter saved at `path` makes, from `block_file` there: a DFlash
    config.json's block_size - 1 (its block holds the bonus), a parallel drafter's block.json's
    block_size; None when it cannot be read (validation then names the problem)."""
    from speculab.models.dflash_layout import dflash_layout

    try:
        found = read_json(path / block_file)
    except ValueError:
        return None
    if block_file == "block.json":
        size = found.get("block_size")
        return size if isinstance(size, int) else None
    layout = dflash_layout(found)[0]
    return None if layout is None else layout.block_size - 1


def block_length(drafter: DrafterConfig, draft_dir: Path | None) -> int | None:
    """The longest draft the configured drafter makes in one pass (`DrafterSpec.block_file` in
    `draft_dir`, the draft role's checkpoint), or None for a drafter without a block or a checkpoint
    that was not found."""
    from speculab.registry import DRAFTERS

    spec = DRAFTERS.get(drafter.name)
    if spec is None or not spec.block_file or draft_dir is None:
        return None
    return _block_of(draft_dir, spec.block_file)


def drafter_checkpoint_errors(cfg: ModelView, found: dict[str, Checkpoint]) -> list[str]:
    """The draft role's checkpoint against the drafter and the draft length: a parallel drafter's block
    size, a DFlash drafter's layout and target, and a DFlash checkpoint named as another drafter."""
    from speculab.models.dflash_layout import is_dflash
    from speculab.registry import DRAFTERS

    if "draft" not in found:
        return []
    L, drafter = draft_length(cfg.algorithm), cfg.drafter.name  # set by `config.checks.with_draft_length`
    errors = _block_size_errors(L, found["draft"])
    conditioned = drafter in DRAFTERS and DRAFTERS[drafter].target_features
    if "target" in found and conditioned:
        errors += dflash_errors(L, found["draft"], found["target"], cfg.model.name, DRAFTERS[drafter])
    elif is_dflash(found["draft"].config):
        takers = ", ".join(name for name, d in DRAFTERS.items() if d.target_features)
        errors.append(
            f"drafter.name={drafter!r}: {found['draft'].key} is a DFlash checkpoint (dflash_config); "
            f"it drafts only as drafter={takers}"
        )
    return errors


def _block_size_errors(L: int, draft: Checkpoint) -> list[str]:
    """A parallel drafter (block.json in the draft's dir) drafts at most its block size."""
    block_json = draft.path / "block.json"
    if not block_json.is_file():
        return []
    try:
        size = read_json(block_json).get("block_size")
    except ValueError as err:
        return [f"{draft.key}: {err}"]
    if not isinstance(size, int):
        return [f"{draft.key}: {block_json} has no integer block_size"]
    if size < L:
        return [f"algorithm.L={L}: the parallel drafter drafts at most {size} tokens (1..{size})"]
    return []


def _kind_error(drafter: DrafterSpec, where: str, selects: bool) -> str:
    """A DFlash2 checkpoint given to a DFlash drafter, or a DFlash one to a DFlash2 drafter."""
    from speculab.registry import DRAFTERS

    takers = "/".join(n for n, d in DRAFTERS.items() if d.target_features and d.selector == selects)
    if selects:
        return (
            f"drafter.name={drafter.name!r}: {where} is a DFlash2 checkpoint (dflash_config names its candidate "
            f"selector); it drafts as drafter={takers}"
        )
    return (
        f"drafter.name={drafter.name!r}: {where} names no candidate selector (dflash_config.selector_rank, "
        f"selector_top_k, conv_kernel_size, conv_group_size): a DFlash checkpoint; it drafts as drafter={takers}"
    )


def dflash_errors(L: int, draft: Checkpoint, target: Checkpoint, model: str, drafter: DrafterSpec) -> list[str]:
    """A DFlash drafter's config.json against its target's: its drafting settings in any published
    layout (models/dflash_layout.py), layer ids below the target's layer count, one hidden size, and
    algorithm.L below the block size (the block holds the bonus and block_size - 1 drafts); a DFlash2
    checkpoint (a candidate selector) drafts as drafter=dflash2 only, and drafter=dflash2 needs one."""
    from speculab.models.dflash_layout import dflash_layout, draft_value, is_dflash

    where = f"{draft.key}: {draft.path / 'config.json'}"
    if not is_dflash(draft.config):
        presets = ", ".join(f"model={p.stem}" for p in sorted((PROJECT_ROOT / "conf" / "model").glob("*_dflash.yaml")))
        return [
            f"drafter.name={drafter.name!r}: {where} has no dflash_config, so model={model}'s draft is not a DFlash "
            f"drafter; presets with one: {presets} (or set drafter.path to a DFlash checkpoint)"
        ]
    layout, layout_errors = dflash_layout(draft.config)
    errors = [f"{where}: {error}" for error in layout_errors]
    if layout is not None and (layout.dflash2 is not None) != drafter.selector:
        errors.append(_kind_error(drafter, where, layout.dflash2 is not None))
    layers = target.config.get("num_hidden_layers")
    ids_key, listed = draft_value(draft.config, "target_layer_ids")
    ids_key = ids_key if listed is not None else "target_layer_ids (spread by num_target_layers)"
    if layout is not None and isinstance(layers, int) and not all(0 <= i < layers for i in layout.target_layer_ids):
        errors.append(
            f"{where}: {ids_key}={list(layout.target_layer_ids)}: each must be in 0..{layers - 1} "
            f"(the target {target.path} has num_hidden_layers={layers})"
        )
    if layout is not None and not 1 <= L <= layout.block_size - 1:
        size = layout.block_size
        errors.append(f"algorithm.L={L}: the DFlash drafter drafts at most block_size - 1 = {size - 1} tokens")
    if draft.config.get("hidden_size") != target.config.get("hidden_size"):
        errors.append(
            f"{where}: hidden_size={draft.config.get('hidden_size')!r} differs from the target's "
            f"hidden_size={target.config.get('hidden_size')!r}: DFlash uses the target's embeddings and lm_head"
        )
    if draft.config.get("model_type") != "qwen3":
        errors.append(f"{where}: model_type={draft.config.get('model_type')!r}: must be qwen3 (DFlash layers)")
    return errors
