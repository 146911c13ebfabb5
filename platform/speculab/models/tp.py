"""This rank's shard of a transformers causal LM, by DeepSpeed's AutoTP or by transformers' own
tensor parallelism (`cluster.tp_backend`: `deepspeed`, the default, or `transformers`).

`join_process_group` puts the calling process into a torch.distributed world (gloo on CPU,
NCCL on GPU), through DeepSpeed for its backend. `load_tp_causal_lm` then loads the shard:

- `deepspeed`: the model is built on the meta device and DeepSpeed's AutoTP reads the checkpoint
  one shard file at a time (safetensors
or torch .bin, HF key names): each module found in the file is filled on the host at full
size and, for the attention and MLP projections, cut to this rank's slice at once; the
embedding stays whole and the lm head is sliced after the last file. So a rank holds its
slices, the embedding, one shard file and one full tensor at a time, never the full model.
HF modules stay (only o_proj / down_proj / lm_head become all-reduce linears), so `TreeLM`'s
4-D masks, position ids and KV compaction work unchanged.
- `transformers`: `from_pretrained` with the model's own `tp_plan` (`DistributedConfig(tp_plan="auto")`,
  which needs `accelerate`): the projections become DTensors sharded over a one-dimensional device
  mesh, and the modules' hooks gather and reduce around them; `TreeLM` runs those modules too.
Which process runs which rank, and keeping ranks in lock step, is `speculab.runtime`'s job; the two
backends are compared in docs/runtime.md.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch

from speculab.models.rotary import recreate_rotary_buffers

if TYPE_CHECKING:
    from transformers import PreTrainedModel


def disable_cpu_shm_allreduce() -> None:
    """Keep DeepSpeed from JIT-building its CPU shared-memory all-reduce (see docs/runtime.md).

    That op segfaults unless every rank shares one host with ~66 MiB of /dev/shm each, and
    leaves files in /dev/shm; without it DeepSpeed's CPU all-reduce falls back to gloo.
    `import deepspeed.comm.torch` binds the name to torch, hence the sys.modules lookup.
    """
    import deepspeed.comm.torch  # noqa: F401  (loads the module we patch)

    cast(Any, sys.modules["deepspeed.comm.torch"]).build_shm_op = lambda: None


def join_process_group(
    rank: int, world: int, address: str, port: int, device: str, timeout_s: float = 600.0, tp_backend: str = "deepspeed"
) -> None:
    """Join the torch.distributed world of a TP group; every rank must call this concurrently. A
    collective of that world that waits more than `timeout_s` for a peer fails (a dead peer never
    hangs a rank). DeepSpeed's backend joins through DeepSpeed, which keeps its own view of the world."""
    os.environ.update(MASTER_ADDR=address, MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world))
    # Ray shows each GPU actor only its own GPU, so the local device index is 0 there.
    os.environ.update(LOCAL_RANK="0" if device == "cuda" else str(rank), LOCAL_SIZE=str(world))
    backend = "nccl" if device == "cuda" else "gloo"
    if tp_backend == "deepspeed":
        import deepspeed

        disable_cpu_shm_allreduce()
        deepspeed.init_distributed(dist_backend=backend, timeout=timedelta(seconds=timeout_s))
    else:
        torch.distributed.init_process_group(backend, timeout=timedelta(seconds=timeout_s))


def checkpoint_files(path: Path) -> list[str]:
    """Weight files of a local HF checkpoint, relative to it (sharded or single file)."""
    for index_name in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
        index = path / index_name
        if index.is_file():
            return sorted(set(json.loads(index.read_text())["weight_map"].values()))
    for single in ("model.safetensors", "pytorch_model.bin"):
        if (path / single).is_file():
            return [single]
    raise FileNotFoundError(f"{path}: no model.safetensors or pytorch_model.bin (or their index)")


def load_tp_causal_lm(
    path: str | Path, dtype: str, device: str, tp_size: int, tp_backend: str = "deepspeed"
) -> PreTrainedModel:
    """This rank's shard by `tp_backend` (TP_BACKENDS); the process must already be in a world of
    tp_size ranks (`join_process_group`)."""
    if tp_size < 2:  # DeepSpeed skips AutoTP at 1 and leaves the meta-built model unloaded
        raise ValueError(f"tp_size must be at least 2 for a tensor-parallel load, got {tp_size}")
    return TP_BACKENDS[tp_backend](Path(path), dtype, device, tp_size)


def transformers_shard(path: Path, dtype: str, device: str, tp_size: int) -> PreTrainedModel:
    """transformers' own tensor parallelism: `from_pretrained` with the model's `tp_plan` over a device
    mesh of the world's tp_size ranks (it reads each checkpoint tensor whole and keeps this rank's slice)."""
    from transformers import AutoModelForCausalLM, DistributedConfig

    model = AutoModelForCausalLM.from_pretrained(
        path,
        dtype=getattr(torch, dtype),
        distributed_config=DistributedConfig(tp_plan="auto", tp_size=tp_size),
        attn_implementation="sdpa",
        local_files_only=True,
    )
    return model.eval()


def deepspeed_shard(path: Path, dtype: str, device: str, tp_size: int) -> PreTrainedModel:
    """DeepSpeed's AutoTP, reading the checkpoint one shard file at a time into a meta-device model."""
    import deepspeed
    from transformers import AutoConfig, AutoModelForCausalLM

    torch_dtype = getattr(torch, dtype)
    config = AutoConfig.from_pretrained(path, local_files_only=True)
    # torch's own device context, not deepspeed.OnDevice: OnDevice swaps `torch.Tensor.__new__`,
    # and a transformers module imported inside it (5.x imports torch._dynamo lazily from
    # masking_utils) fails dynamo's signature check of that very function.
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch_dtype, attn_implementation="sdpa")
    checkpoint = {"type": "ds_model", "checkpoints": checkpoint_files(path), "version": 1.0}
    engine = deepspeed.init_inference(
        model.eval(),
        tensor_parallel={"tp_size": tp_size},
        dtype=torch_dtype,
        checkpoint=checkpoint,
        base_dir=str(path),
        replace_with_kernel_inject=False,
    )
    module = engine.module.to(device)
    recreate_rotary_buffers(module, device)
    left = [name for name, t in [*module.named_parameters(), *module.named_buffers()] if t.is_meta]
    if left:
        raise RuntimeError(f"{path}: tensors still on the meta device after loading: {left[:5]}")
    return module.eval()


# cluster.tp_backend -> how this rank loads its shard
TP_BACKENDS: dict[str, Callable[[Path, str, str, int], PreTrainedModel]] = {
    "deepspeed": deepspeed_shard,
    "transformers": transformers_shard,
}
