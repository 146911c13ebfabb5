"""Rank 0 of a tensor-parallel group announces each call of its sharded models to its peers, which run it too.

A tensor-parallel model's ranks must run the same calls in the same order, or the collectives
inside their forward passes never meet. With the decode loop on rank 0 (`runtime.loop=target`,
`runtime.loop_host`), rank 0's target is a `Leader`: each call (prefill, score, commit, retain, the
baselines' passes, transformers' generate) is first broadcast to the peers over the group's own
torch.distributed world as one object (the role, the method and its arguments: a small header and the
tensors a round carries), then run on rank 0's shard. A draft sharded over the same ranks
(`cluster.draft_placement=sharded`) is a `Leader` too, announcing through the same `Announcer`, so the
two models' calls reach every rank in the one order rank 0 made them. Every other rank is a `Follower`,
whose shards run what they are told until rank 0 releases it at the end of the driver's call. So the
driver makes one Ray call per rank and unit and none per round. With one rank there is nobody to tell:
the same code makes no collective.

Values rank 0 needs from every rank come back over the same world: `kv_bytes` and `cpu_seconds` are
summed (each rank holds a slice of the KV heads; a decode's CPU time is every rank's), `conditions`
gathered (the run's caption names every rank's process). A collective that waits on a dead peer ends
with the world's timeout (`runtime.collective_timeout_s`); before that, the driver's proxy sees the
dead actor and tears the group down (`runtime.proxy`).
"""

from __future__ import annotations

import math
import pickle
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.distributed as dist

from speculab.core.autoregressive import autoregressive
from speculab.core.engine import DecodeSettings
from speculab.core.records import RunResult
from speculab.runtime.calls import semantics
from speculab.runtime.nested import mapped

SUMMED = frozenset({"kv_bytes", "cpu_seconds"})  # rank 0 returns the sum over ranks
GATHERED = frozenset({"conditions"})  # rank 0 returns its own, naming every peer's
# Decodes every rank runs whole from one announcement, making each target call itself in rank 0's order
# (the same logits after the collectives and the same seed give every rank the same tokens, so the same
# calls): the autoregressive baseline then costs one announcement a decode, not one a token.
WHOLE: dict[str, Callable[..., RunResult]] = {"autoregressive": autoregressive}


@dataclass(frozen=True)
class Call:
    role: str  # which of a rank's models runs it: "target", or "draft" where the draft is sharded too
    method: str
    args: tuple
    kwargs: dict


def _staging() -> torch.device:
    """Where the world's collectives stage objects: the current GPU under NCCL, else the CPU."""
    return torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")


# One announcement is one broadcast of this many bytes: the pickled calls with their tensors left out,
# then the bytes of their CPU tensors (pickling a tensor costs a few hundred microseconds, its bytes almost
# nothing). A larger one (a prefill's long prompts) sends the rest in a second broadcast; tensors on a
# GPU follow one broadcast each on their device, never through the host.
ANNOUNCEMENT_BYTES = 16384


@dataclass(frozen=True)
class TensorRef:
    """A tensor of an announcement, by its place among them: what a peer allocates to receive it."""

    index: int
    dtype: torch.dtype
    shape: tuple[int, ...]
    device: str  # rank 0's device type: "cpu" travels in the announcement's bytes, "cuda" on the device


def ref_of(index: int, tensor: torch.Tensor) -> TensorRef:
    return TensorRef(index, tensor.dtype, tuple(tensor.shape), tensor.device.type)


def stripped(value: Any, tensors: list[torch.Tensor]) -> Any:
    """`value` with each tensor in it replaced by a TensorRef and appended to `tensors` (a call's
    arguments, a DraftTree)."""

    def ref(tensor: torch.Tensor) -> TensorRef:
        tensors.append(tensor)
        return ref_of(len(tensors) - 1, tensor)

    return mapped(value, lambda item: isinstance(item, torch.Tensor), ref)


def dressed(value: Any, tensors: list[torch.Tensor]) -> Any:
    """The inverse of `stripped`: each TensorRef replaced by its tensor."""
    return mapped(value, lambda item: isinstance(item, TensorRef), lambda r: tensors[r.index])


def _broadcast(data: bytes | None) -> bytes:
    """Rank 0's `data` (None elsewhere) on every rank: one broadcast of ANNOUNCEMENT_BYTES, whose first
    8 bytes give the length, and a second for what does not fit."""
    box = torch.zeros(ANNOUNCEMENT_BYTES, dtype=torch.uint8)
    if data is not None:
        framed = len(data).to_bytes(8, "little") + data
        head = framed[:ANNOUNCEMENT_BYTES]
        box[: len(head)] = torch.frombuffer(bytearray(head), dtype=torch.uint8)
    box = box.to(_staging())
    dist.broadcast(box, src=0)
    received = box.cpu().numpy().tobytes()
    length = int.from_bytes(received[:8], "little")
    found = received[8 : 8 + length]
    if len(found) < length:  # the rest, in a second broadcast
        rest = torch.empty(length - len(found), dtype=torch.uint8)
        if data is not None:
            rest = torch.frombuffer(bytearray(data[len(found) :]), dtype=torch.uint8)
        rest = rest.to(_staging())
        dist.broadcast(rest, src=0)
        found += rest.cpu().numpy().tobytes()
    return found


def encoded(calls: list[Call] | None) -> tuple[bytes, list[torch.Tensor]]:
    """(the announcement's bytes: the pickled calls without their tensors, then the CPU tensors' bytes;
    the tensors on a device, which travel on it)."""
    tensors: list[torch.Tensor] = []
    header = pickle.dumps((stripped(calls, tensors), [ref_of(index, t) for index, t in enumerate(tensors)]))
    on_cpu = b"".join(t.contiguous().numpy().tobytes() for t in tensors if t.device.type == "cpu")
    return len(header).to_bytes(8, "little") + header + on_cpu, [t for t in tensors if t.device.type != "cpu"]


def decoded(data: bytes, on_device: Callable[[TensorRef], torch.Tensor]) -> list[Call] | None:
    """The calls of an announcement's bytes (`encoded`), each tensor on a device from `on_device`."""
    size = int.from_bytes(data[:8], "little")
    calls, refs = pickle.loads(data[8 : 8 + size])
    offset, tensors = 8 + size, []
    for ref in refs:
        if ref.device != "cpu":
            tensors.append(on_device(ref))
            continue
        count = math.prod(ref.shape) * torch.empty((), dtype=ref.dtype).element_size()
        tensors.append(from_bytes(data[offset : offset + count], ref))
        offset += count
    return dressed(calls, tensors)


def from_bytes(raw: bytes, ref: TensorRef) -> torch.Tensor:
    """A CPU tensor of `ref`'s dtype and shape, owning a copy of `raw`."""
    if not raw:
        return torch.empty(ref.shape, dtype=ref.dtype)
    return torch.frombuffer(bytearray(raw), dtype=ref.dtype).reshape(ref.shape)


def announce(calls: list[Call] | None) -> None:
    """Rank 0: tell every peer the next calls, in order (None: the driver's call is over)."""
    data, on_device = encoded(calls)
    _broadcast(data)
    for tensor in on_device:
        dist.broadcast(tensor.contiguous(), src=0)


def announced() -> list[Call] | None:
    """A peer: rank 0's next calls (None: back to Ray)."""

    def received(ref: TensorRef) -> torch.Tensor:
        tensor = torch.empty(ref.shape, dtype=ref.dtype, device=_staging())
        dist.broadcast(tensor, src=0)
        return tensor

    return decoded(_broadcast(None), received)


def combined(method: str, value: Any) -> Any:
    """What rank 0 returns for `method`: the sum over ranks (SUMMED), its own conditions naming the
    peers' (GATHERED; peers get None), or its own value (every rank computes the same)."""
    if method in SUMMED:
        total = torch.tensor([float(value)], dtype=torch.float64, device=_staging())
        dist.all_reduce(total)
        return type(value)(total.item())
    if method in GATHERED:
        found: list[Any] | None = [None] * dist.get_world_size() if dist.get_rank() == 0 else None
        dist.gather_object(value, found, dst=0)
        return replace(found[0], peers=tuple(found[1:])) if found is not None else None
    return value


class Announcer:
    """Rank 0's side of a world of `world` ranks: the calls of every model it leads, announced in the order
    they run. Calls that make no collective (commit, retain: cache edits) wait for the next one that does,
    so that a model step costs one announcement; the peers' caches only need them before that call."""

    def __init__(self, world: int) -> None:
        self.world = world
        self.waiting: list[Call] = []  # local calls run here, not yet announced

    def run(self, model: Any, call: Call) -> Any:
        if self.world == 1:
            return getattr(model, call.method)(*call.args, **call.kwargs)
        self.send(call)
        return combined(call.method, getattr(model, call.method)(*call.args, **call.kwargs))

    def send(self, call: Call) -> None:
        """Announce `call` with the local calls before it, or hold it for the next where it makes no
        collective (`runtime.calls`: a cache edit)."""
        if not semantics(call.role, call.method).collective:
            self.waiting.append(call)
            return
        announce([*self.waiting, call])
        self.waiting = []

    @contextmanager
    def leading(self) -> Iterator[None]:
        """The peers follow for the block's calls and go back to Ray when it ends, error or not."""
        try:
            yield
        finally:
            if self.world > 1:
                if self.waiting:
                    announce(self.waiting)
                    self.waiting = []
                announce(None)


class Leader:
    """Rank 0's model of `role` (its shard): each call is announced to the peers, then run here."""

    def __init__(self, model: Any, announcer: Announcer, role: str = "target") -> None:
        self.model, self.announcer, self.role = model, announcer, role

    def __getattr__(self, method: str) -> Any:
        if method.startswith("_"):
            raise AttributeError(method)
        return lambda *args, **kwargs: self.announcer.run(self.model, Call(self.role, method, args, kwargs))

    def autoregressive(self, prompts: list[list[int]], settings: DecodeSettings) -> RunResult:
        """The autoregressive baseline on every rank from one announcement (WHOLE)."""
        call = Call(self.role, "autoregressive", (prompts, settings), {})
        if self.announcer.world > 1:
            self.announcer.send(call)
        return whole(call.method, self.model, *call.args, **call.kwargs)


class Follower:
    """A peer rank: its shards (by role) run what rank 0 announces, until rank 0 releases it."""

    def __init__(self, models: dict[str, Any]) -> None:
        self.models = models

    def follow(self) -> None:
        while (calls := announced()) is not None:
            for call in calls:
                model = self.models[call.role]
                if call.method in WHOLE:
                    whole(call.method, model, *call.args, **call.kwargs)
                else:
                    combined(call.method, getattr(model, call.method)(*call.args, **call.kwargs))


def whole(method: str, model: Any, *args: Any, **kwargs: Any) -> RunResult:
    """`method`'s decode (WHOLE) on this rank's `model`, each round's KV bytes summed over the world's ranks
    where it has several (a group's ranks run it together: from rank 0's announcement, or each from the
    driver's one Ray call)."""
    result = WHOLE[method](model, *args, **kwargs)
    return summed_kv(result) if dist.is_initialized() and dist.get_world_size() > 1 else result


def summed_kv(result: RunResult) -> RunResult:
    """A whole decode's result with each round's target KV bytes summed over the ranks (each holds a
    slice of the heads), as `kv_bytes` is when rank 0 asks for it call by call."""
    held = torch.tensor([float(r.kv_target_bytes) for r in result.rounds], dtype=torch.float64, device=_staging())
    dist.all_reduce(held)
    rounds = [replace(r, kv_target_bytes=int(b)) for r, b in zip(result.rounds, held.tolist())]
    return replace(result, rounds=rounds)
