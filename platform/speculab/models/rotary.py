"""Rotary buffers in float32 whatever the weights' dtype.

A rotary embedding's `inv_freq` is not in any checkpoint: transformers computes it in float32 at
construction and keeps it there under `from_pretrained(dtype=bfloat16)`. A model cast with
`.to(dtype=...)` (the DFlash drafter's load) or built on the meta device (the AutoTP load) loses
it; in bfloat16 its 8-bit mantissa turns position 1024's angles wrong by radians, so the
rotary embedding computes its cos/sin from a recomputed float32 `inv_freq` instead.
"""

from __future__ import annotations

from typing import Any, cast

import torch


def recreate_rotary_buffers(model: torch.nn.Module, device: str | torch.device) -> None:
    """Recompute every transformers rotary embedding's `inv_freq` (and `original_inv_freq`) in float32."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    for module in model.modules():
        if isinstance(getattr(module, "inv_freq", None), torch.Tensor) and hasattr(module, "rope_type"):
            rotary = cast(Any, module)  # a transformers *RotaryEmbedding: no common class to name
            init = (
                rotary.compute_default_rope_parameters
                if rotary.rope_type == "default"
                else ROPE_INIT_FUNCTIONS[rotary.rope_type]
            )
            # computed where transformers computes it (its `device` argument is deprecated in 5.17 and
            # ignored by the default init of 5.24), then moved: no host copy in a forward
            inv_freq, rotary.attention_scaling = init(rotary.config)
            rotary.inv_freq = inv_freq.to(device=device, dtype=torch.float32)
            rotary.original_inv_freq = rotary.inv_freq.clone()
