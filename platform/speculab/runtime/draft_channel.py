"""A draft model in an actor of its own, driven by the decode loop on the target's rank 0 over a socket.

With `cluster.draft_placement=own` and the loop on the target (`runtime.loop=target`), the draft
actor serves its `DraftModel` on a socket of its own (`DraftServer`, started by `ModelHost.serve_draft`)
and rank 0's loop drives it through a `DraftClient`, which has the engine's `Drafter` methods. A round
then makes no Ray call: each call is one pickled message over a local or TCP socket (tens of
microseconds for a round's tokens), and the calls that return nothing (`prefill`, `commit`, `retain`,
`speculate`) are sent without waiting, so the draft works while the loop goes on: drafting the next
round ahead (`drafting.ahead`) runs while the target scores this one. A call that waits (`propose`,
`conditions`) returns once the draft has run everything sent before it; an error in a call that did
not wait is raised by the next one that does. The draft's KV peak comes with each proposal. A socket
that closes under a call (the draft actor died) raises `DraftLost`; the driver then restarts the draft's
group and decodes the unit again (`runtime.served.ServedDraftLoop`).

Each reply to `propose` carries the draft's busy seconds since the previous one (its model calls, timed
in its process): with the loop's wait on the draft (the engine's draft phase) they say how long each
side waited for the other.
"""

from __future__ import annotations

import os
import pickle
import secrets
import socket
import threading
import time
from dataclasses import dataclass, replace
from multiprocessing.connection import Client, Connection, Listener
from typing import Any

import numpy as np
import torch

from speculab.drafting.sampling import SamplingParams
from speculab.drafting.tree import Proposal
from speculab.models import DraftModel
from speculab.models.roles import Conditions
from speculab.runtime.nested import mapped

WAITED = frozenset({"propose", "conditions"})  # the calls whose value the loop needs


@dataclass(frozen=True)
class Packed:
    """A CPU tensor as a NumPy array on the wire: pickling a round's q [1, 1, 4, 4096] as a tensor takes
    about 0.8 ms there and back, as an array a few microseconds."""

    array: np.ndarray


def packable(item: Any) -> bool:
    return isinstance(item, torch.Tensor) and item.device.type == "cpu" and item.dtype != torch.bfloat16


def sent(conn: Connection, value: Any) -> None:
    """`value` pickled whole, tensors by value: a connection's own pickler would hand CPU tensors over as
    shared memory, which only a process forked from this one can open."""
    packed = mapped(value, packable, lambda tensor: Packed(tensor.numpy()))
    conn.send_bytes(pickle.dumps(packed, protocol=pickle.HIGHEST_PROTOCOL))


def received(conn: Connection) -> Any:
    return mapped(pickle.loads(conn.recv_bytes()), lambda item: isinstance(item, Packed), unpacked)


def unpacked(packed: Packed) -> torch.Tensor:
    return torch.from_numpy(packed.array)


@dataclass(frozen=True)
class DraftAddress:
    """Where a draft actor serves its model: its node's address, a port, and the key a client must hold."""

    host: str
    port: int
    key: bytes


class DraftLost(RuntimeError):
    """The draft actor's socket closed under a call: the actor (or its node) is gone."""


@dataclass(frozen=True)
class Failed:
    """A call's error, sent with the next reply."""

    error: BaseException


@dataclass(frozen=True)
class Proposed:
    """The reply to `propose`: the proposal, the draft's busy seconds since its last one, and its KV peak."""

    proposal: Proposal
    busy_s: float
    kv_bytes: int


def no_delay(conn: Connection) -> Connection:
    """`conn` sending each message at once: without TCP_NODELAY a small message after another waits for
    the peer's delayed acknowledgement (Nagle's algorithm: about 40 ms a round)."""
    with socket.socket(fileno=os.dup(conn.fileno())) as shared:  # the same socket: its options are conn's
        shared.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return conn


class DraftServer:
    """Serves `draft` to one client at a time, each call in the order sent, in a thread of the actor."""

    def __init__(self, draft: DraftModel, host: str) -> None:
        self.draft = draft
        self.key = secrets.token_bytes(16)
        self.listener = Listener((host, 0), authkey=self.key)
        self.address = DraftAddress(host, self.listener.address[1], self.key)
        threading.Thread(target=self.serve, name="speculab-draft-server", daemon=True).start()

    def serve(self) -> None:
        while True:
            with no_delay(self.listener.accept()) as conn:
                self.answer(conn)

    def answer(self, conn: Connection) -> None:
        """Run what the client sends until it hangs up: (method, args, kwargs) each."""
        failed: BaseException | None = None
        busy = 0.0
        while True:
            try:
                method, args, kwargs = received(conn)
            except (EOFError, OSError):
                return
            start = time.perf_counter()
            value: Any = None
            try:
                if failed is None:
                    value = getattr(self.draft, method)(*args, **kwargs)
            except Exception as err:  # raised by the next call that waits
                failed = err
            busy += time.perf_counter() - start
            if method not in WAITED:
                continue
            if failed is not None:
                sent(conn, Failed(failed))
                failed = None
                continue
            if method == "propose":
                value, busy = Proposed(value, busy, self.draft.kv_bytes()), 0.0
            sent(conn, value)


class DraftClient:
    """The engine's drafter over a `DraftServer`: the calls that return nothing are sent without waiting."""

    def __init__(self, address: DraftAddress) -> None:
        self.conn = no_delay(Client((address.host, address.port), authkey=address.key))
        self.kv = 0  # the draft's KV peak as of its last proposal

    def _send(self, method: str, *args: Any, **kwargs: Any) -> None:
        try:
            sent(self.conn, (method, args, kwargs))
        except OSError as err:
            raise DraftLost(f"the draft actor's socket closed sending {method} ({type(err).__name__})") from None

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        self._send(method, *args, **kwargs)
        try:
            value = received(self.conn)
        except (EOFError, OSError) as err:
            raise DraftLost(f"the draft actor's socket closed waiting for {method} ({type(err).__name__})") from None
        if isinstance(value, Failed):
            raise value.error
        return value

    def prefill(
        self, contexts: list[list[int]], roots: list[int], seed: int, features: Any = None, room: int = 0
    ) -> None:
        self._send("prefill", contexts, roots, seed, features=features, room=room)

    def propose(self, num_paths: int, length: int, sampling: SamplingParams) -> Proposal:
        proposed: Proposed = self._call("propose", num_paths, length, sampling)
        self.kv = proposed.kv_bytes
        return replace(proposed.proposal, draft_busy_s=proposed.busy_s)

    def speculate(self, paths: torch.Tensor, fan: list[int], sampling: SamplingParams) -> None:
        self._send("speculate", paths, fan, sampling)

    def commit(self, emitted: list[list[int]], features: Any = None) -> None:
        self._send("commit", emitted, features=features)

    def retain(self, rows: torch.Tensor) -> None:
        self._send("retain", rows)

    def kv_bytes(self) -> int:
        """The draft's KV peak since its prefill, as of its last proposal (asked with no wait of its own)."""
        return self.kv

    def conditions(self) -> Conditions:
        return self._call("conditions")

    def close(self) -> None:
        self.conn.close()
