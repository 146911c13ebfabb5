"""A KV cache of preallocated slots, written in place: the static cache of `TreeLM`.

transformers' `DynamicCache` appends each forward's keys and values with `torch.cat`, so every
decoding step copies the whole cache (O(S) per step, O(S^2) per sequence) and allocates anew.
`SlotLayer` keeps a layer's keys and values in buffers [B, H, C, D] allocated once for a
capacity of C slots, writes a forward's N new slots at [S, S + N) in place, and hands out the
views [:, :, :S + N] as `keys` and `values`. What `TreeLM` does to a cache between forwards is
in place too: keeping a prefix (`truncate`) only moves the length; keeping other forest nodes
(`gather_slots`), dropping holes (`repack`) and dropping finished rows (`keep_rows`) gather
into the same buffers. A buffer grows (doubling, one copy) only when a forward would pass its
capacity, so a capacity set from the workload (`workload_capacity`) never reallocates.

It is a transformers `Cache` of `DynamicLayer` subclasses, so a model's own modules (other
architectures, a tensor-parallel target, the block drafter) update it through the same
`update(keys, values, layer_idx)` the lean stack calls, and read `get_seq_length()` from it.
"""

from __future__ import annotations

import torch
from transformers import Cache, DynamicLayer

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


def slot_cache(num_layers: int, capacity: int = DEFAULT_CAPACITY) -> Cache:
    """A transformers `Cache` of `num_layers` slot layers of `capacity` slots each."""
    return Cache(layers=[SlotLayer(capacity) for _ in range(num_layers)])
