"""The KV cache of `TreeLM` and `DFlashLM`: preallocated slots written in place, and their validity.

transformers' `DynamicCache` appends each forward's keys and values with `torch.cat`, so every
decoding step copies the whole cache (O(S) per step, O(S^2) per sequence) and allocates anew.
`SlotLayer` keeps a layer's keys and values in buffers [B, H, C, D] allocated once for a
capacity of C slots, writes a forward's N new slots at [S, S + N) in place, and hands out the
views [:, :, :S + N] as `keys` and `values`. Every later edit is in place too: keeping a prefix
(`truncate`) only moves the length; keeping other slots (`gather_slots`, `repack`) and dropping
finished rows (`keep_rows`) gather into the same buffers. A buffer grows (doubling, one copy)
only when a forward would pass its capacity, so a capacity set from the workload
(`workload_capacity`) never reallocates.

`SlotCache` is a batch's slots over every layer, with what both models keep about them: which
slots are valid (left padding, rejected nodes), how many are committed (the rest are a pass's
uncommitted nodes: a draft forest, a block), each row's context length (its valid committed
slots: the position of its next token), and when to drop the holes (`repack`): before a pass
would pass the capacity, and after a commit that leaves fewer than 3/4 of the slots valid.

Its layers form a transformers `Cache` of `DynamicLayer` subclasses, so a model's own modules
(other architectures, a tensor-parallel target, the parallel drafter) update it through the same
`update(keys, values, layer_idx)`, and read `get_seq_length()` from it; the lean stack updates each
`SlotLayer` directly.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import Cache, DynamicLayer

from speculab.device.hostreads import reads_free

DEFAULT_CAPACITY = 256  # slots a layer starts with when the caller does not know its workload


def workload_capacity(contexts: list[list[int]], room: int) -> int:
    """Slots a batch's cache needs so that it never grows: the widest context, then `room`, what a
    decode adds to it (its new tokens and its largest draft forest; 0: not known, and the cache
    then starts with DEFAULT_CAPACITY more and grows past it). Holes left by rows that accepted
    fewer tokens than others are repacked away when they would push a forward past it."""
    return max((len(c) for c in contexts), default=0) + (room or DEFAULT_CAPACITY)


# cache [B, H, S, D], index [B, M] -> [B, H, M, D]
def gather_slots(cache: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    return cache.gather(2, index[:, None, :, None].expand(-1, cache.shape[1], -1, cache.shape[3]))


class SlotLayer(DynamicLayer):
    """One layer's keys and values in slot buffers [B, H, C, D]; `keys`, `values` view the first `length`."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        super().__init__()
        self.capacity = capacity
        self.length = 0
        self.buffers: tuple[torch.Tensor, torch.Tensor] | None = None

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.device = key_states.device
        self.buffers = (self._empty(key_states, self.capacity), self._empty(value_states, self.capacity))
        self.is_initialized = True
        self._set_length(0)

    @staticmethod
    def _empty(like: torch.Tensor, capacity: int) -> torch.Tensor:
        B, H, _, D = like.shape
        return like.new_empty(B, H, capacity, D)

    def _set_length(self, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Use the first `length` slots: (keys, values) [B, H, length, D], views of the buffers."""
        assert self.buffers is not None
        keys, values = (buffer[:, :, :length] for buffer in self.buffers)
        self.length, self.keys, self.values = length, keys, values
        return keys, values

    @property
    def nbytes(self) -> int:
        """Bytes of the slots in use, keys and values: arithmetic on the shape (a view per buffer would
        cost ~2 us each, and the engine reads every layer's figure after each pass)."""
        if self.buffers is None:
            return 0
        return sum(b.shape[0] * b.shape[1] * self.length * b.shape[3] * b.element_size() for b in self.buffers)

    def _reserve(self, slots: int) -> None:
        """Room for `slots` slots: a doubled buffer, the used slots copied, when they do not fit."""
        assert self.buffers is not None
        if slots <= self.buffers[0].shape[2]:
            return
        capacity = max(slots, 2 * self.buffers[0].shape[2])
        grown = tuple(self._empty(buffer, capacity) for buffer in self.buffers)
        for new, old in zip(grown, self.buffers):
            new[:, :, : self.length] = old[:, :, : self.length]
        self.buffers = grown[0], grown[1]

    # key_states, value_states [B, H, N, D] -> keys, values [B, H, S + N, D]
    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: object, **kwargs: object
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        end = self.length + key_states.shape[2]
        self._reserve(end)
        assert self.buffers is not None
        self.buffers[0][:, :, self.length : end] = key_states
        self.buffers[1][:, :, self.length : end] = value_states
        return self._set_length(end)

    def get_seq_length(self) -> int:
        return self.length

    def adopt(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Use these buffers [B, H, C, D], from slot 0 (a static pass's, kept across batches: its
        captured graphs write to their addresses)."""
        self.device, self.dtype = keys.device, keys.dtype
        self.buffers, self.is_initialized = (keys, values), True
        self._set_length(0)

    def advance(self, slots: int) -> None:
        """Count `slots` more slots as used: a static pass wrote them into the buffers itself."""
        self._set_length(self.length + slots)

    def crop(self, tokens_to_remove: int) -> None:
        """transformers' crop: a negative count drops that many slots from the end."""
        if tokens_to_remove > 0:
            raise ValueError(f"crop({tokens_to_remove}): pass minus the number of slots to drop")
        self.truncate(max(self.length + tokens_to_remove, 0))

    def truncate(self, slots: int) -> None:
        """Keep the first `slots` slots."""
        if self.is_initialized:
            self._set_length(min(slots, self.length))

    # index [B, M]: source slots in [start, length) as offsets from start
    def gather_slots(self, start: int, index: torch.Tensor) -> None:
        """Slots [start, start + M) of row b become old slots start + index[b, j]; the rest is dropped."""
        if not self.is_initialized:
            return
        assert self.buffers is not None
        end = start + index.shape[1]
        for buffer in self.buffers:
            buffer[:, :, start:end] = gather_slots(buffer[:, :, start : self.length], index)
        self._set_length(end)

    # index [B, W]: source slots in [0, length)
    def repack(self, index: torch.Tensor) -> None:
        """Slot j of row b becomes old slot index[b, j], for the first W slots."""
        self.gather_slots(0, index)

    # rows [R]
    def keep_rows(self, rows: torch.Tensor) -> None:
        """Keep batch rows `rows` (in that order) in the first R rows of the buffers."""
        if not self.is_initialized:
            return
        assert self.buffers is not None
        R = rows.shape[0]
        for buffer in self.buffers:
            buffer[:R] = buffer.index_select(0, rows)
        self.buffers = self.buffers[0][:R], self.buffers[1][:R]
        self._set_length(self.length)

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self.keep_rows(indices)

    def reset(self) -> None:
        self.buffers, self.keys, self.values, self.is_initialized, self.length = None, None, None, False, 0


Buffers = list[tuple[torch.Tensor, torch.Tensor]]  # per layer, the cache's (keys, values) [B, Hkv, C, hd]


# Fixed-shape caches are allocated in multiples of this many slots (`cache_buffers`).
CAPACITY_STEP = 256


def cache_buffers(
    kept: Buffers, layers: int, shape: tuple[int, int, int, int], dtype: torch.dtype, device: torch.device
) -> Buffers:
    """Per layer, (keys, values) buffers of `shape` [B, Hkv, C, hd] for a batch's cache under fixed-shape
    passes: `kept` itself when it has the batch size and at least C slots (the graphs captured over its
    addresses stay valid: a point's batches differ in their longest prompt, and reallocating per batch
    would capture every graph again inside the timed runs), else new zeroed ones whose capacity is
    rounded up to a multiple of CAPACITY_STEP, so that a slightly longer prompt still fits them. Zeros,
    not garbage: a masked slot weighs exactly 0 in attention, and 0 times a NaN left in fresh memory
    would still be NaN."""
    B, H, C, D = shape
    if kept and kept[0][0].shape[:2] == (B, H) and kept[0][0].shape[3] == D and kept[0][0].shape[2] >= C:
        return kept
    shape = (B, H, -(-C // CAPACITY_STEP) * CAPACITY_STEP, D)
    return [
        (torch.zeros(shape, dtype=dtype, device=device), torch.zeros(shape, dtype=dtype, device=device))
        for _ in range(layers)
    ]


@dataclass(frozen=True)
class FixedShape:
    """What fixed-shape passes (`models.static_pass`) need of a cache allocated up front, at reset."""

    kv_heads: int
    head_dim: int
    dtype: torch.dtype


class SlotCache:
    """A batch's KV slots over every layer: `valid` [B, S], the first `committed` of them committed,
    the rest a pass's uncommitted nodes. Holes (invalid committed slots) stay until a repack."""

    def __init__(self, num_layers: int, device: torch.device, fixed: FixedShape | None = None) -> None:
        """fixed: allocate each batch's buffers at reset, and keep them while they hold the batch: graphs
        captured over them write to their addresses. None: each layer allocates at its first write."""
        self.num_layers, self.device, self.fixed = num_layers, device, fixed
        self.fixed_buffers: Buffers = []  # the last batch's, under fixed shapes
        self.reset(0)

    def reset(self, batch_size: int, capacity: int = DEFAULT_CAPACITY) -> None:
        """No slots for batch_size rows, with room for `capacity` slots per row (more under fixed shapes:
        the kept buffers' capacity, `cache_buffers`)."""
        if self.fixed is not None and batch_size:
            shape = (batch_size, self.fixed.kv_heads, capacity, self.fixed.head_dim)
            self.fixed_buffers = cache_buffers(
                self.fixed_buffers, self.num_layers, shape, self.fixed.dtype, self.device
            )
            capacity = self.fixed_buffers[0][0].shape[2]
        self.capacity = capacity
        self.layers = [SlotLayer(capacity) for _ in range(self.num_layers)]
        self.cache = Cache(layers=list(self.layers))  # the same layers, as a model's own modules update them
        if self.fixed is not None and batch_size:
            for layer, (keys, values) in zip(self.layers, self.fixed_buffers):
                layer.adopt(keys, values)
        self.valid = torch.zeros(batch_size, 0, dtype=torch.bool, device=self.device)  # [B, S]
        self.committed = 0  # slots [0, committed) hold committed tokens (or holes)
        self._peak = 0  # the most bytes held before a drop (`peak_bytes`)

    @property
    def context_len(self) -> torch.Tensor:
        """[B] valid committed slots per row: the position of its next token."""
        return self.valid[:, : self.committed].sum(dim=1)

    def filled(self) -> list[SlotLayer]:
        """The layers that hold slots (a layer stays empty until its first write)."""
        return [layer for layer in self.layers if layer.is_initialized]

    def buffers(self) -> Buffers:
        """Per filled layer, its (keys, values) buffers [B, Hkv, C, hd]."""
        return [layer.buffers for layer in self.filled() if layer.buffers is not None]

    def nbytes(self) -> int:
        return sum(layer.nbytes for layer in self.filled())

    @property
    def peak_bytes(self) -> int:
        """The most bytes held since reset: every drop records the bytes before it."""
        return max(self._peak, self.nbytes())

    # valid [B, N]
    def add(self, valid: torch.Tensor) -> None:
        """N uncommitted slots that the next pass writes (through each layer's `update`, or `advance`):
        the holes go first if they would push it past the capacity."""
        if self.valid.shape[1] + valid.shape[1] > self.capacity:
            self.repack()
        self.valid = torch.cat([self.valid, valid], dim=1)

    def advance(self, slots: int) -> None:
        """A fixed-shape pass wrote `slots` slots into the buffers itself."""
        for layer in self.filled():
            layer.advance(slots)

    # keep [B, M'] uncommitted slots as offsets after the committed ones, -1 = none -> kept [B, M]
    def commit(self, keep: torch.Tensor) -> torch.Tensor:
        """Commit uncommitted slots keep[b, j], in that order, and drop the rest; the columns no row
        uses hold no slot. Returns the kept offsets, clamped (-1 -> 0: an invalid slot)."""
        nodes = self.valid.shape[1] - self.committed
        if keep.shape[1] == nodes and reads_free(keep) and bool((keep == torch.arange(nodes)).all()):
            # Every row keeps all its nodes in slot order (each autoregressive step): nothing moves, and the
            # general path's two dozen small tensor ops would cost a tiny model ~5% of its step.
            self.commit_all()
            return keep
        if reads_free(keep):  # the columns some row uses; elsewhere all of them (holes, repacked when full)
            used = (keep >= 0).any(dim=0).nonzero()
            keep = keep[:, : int(used.max()) + 1 if len(used) else 0]
        M = keep.shape[1]
        kept = keep.clamp(min=0)
        valid = (keep >= 0) & self.valid[:, self.committed :].gather(1, kept)  # [B, M]
        self._record_peak()
        if reads_free(keep) and bool(((keep == torch.arange(M, device=keep.device)) | (keep < 0)).all()):
            # Every row keeps a prefix of its nodes (holes at -1): crop, as transformers' cache does.
            for layer in self.filled():
                layer.truncate(self.committed + M)
        else:
            for layer in self.filled():
                layer.gather_slots(self.committed, kept)
        self.valid = torch.cat([self.valid[:, : self.committed], valid], dim=1)
        self.committed += M
        self._repack_if_sparse()
        return kept

    def commit_all(self) -> None:
        """Commit every slot as it lies."""
        self.committed = self.valid.shape[1]
        self._repack_if_sparse()

    def crop(self, slots: int) -> None:
        """Keep the first `slots` slots (a pass's nodes that nothing keeps, such as a drafted block)."""
        self._record_peak()
        for layer in self.filled():
            layer.truncate(slots)
        self.valid = self.valid[:, :slots]
        self.committed = min(self.committed, slots)

    # rows [R]
    def retain(self, rows: torch.Tensor) -> None:
        """Keep only batch rows `rows` (finished prompts leave the batch)."""
        if self.committed < self.valid.shape[1]:
            raise RuntimeError("retain() with uncommitted slots: commit first")
        self._record_peak()
        for layer in self.filled():
            layer.keep_rows(rows)
        self.valid = self.valid.index_select(0, rows)

    def repack(self) -> None:
        """Drop the committed slots' holes: each row's valid ones in order, left-padded to the longest
        row; the uncommitted slots follow unchanged."""
        committed = self.valid[:, : self.committed]
        order = torch.sort(committed.to(torch.int8), dim=1, stable=True).indices
        width = int(committed.sum(dim=1).max())
        B, S = self.valid.shape
        uncommitted = torch.arange(self.committed, S, device=self.device).expand(B, -1)
        index = torch.cat([order[:, order.shape[1] - width :], uncommitted], dim=1)  # [B, width + S - committed]
        self._record_peak()
        for layer in self.filled():
            layer.repack(index)
        self.valid = self.valid.gather(1, index)
        self.committed = width

    def _repack_if_sparse(self) -> None:
        """Repack once fewer than 3/4 of the (all committed) slots are valid: the holes of rows that
        accepted fewer tokens than others would otherwise widen every later eager pass. Where that
        check would read the device, the holes stay until a pass would pass the capacity (`add`):
        a fixed-shape pass attends over the whole capacity, holes or not."""
        if reads_free(self.valid) and int(self.context_len.max()) < self.valid.shape[1] * 3 // 4:
            self.repack()

    def _record_peak(self) -> None:
        self._peak = max(self._peak, self.nbytes())
