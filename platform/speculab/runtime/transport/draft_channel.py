"""A draft model in an actor of its own, driven by the decode loop on the target's rank 0 over a socket.

With `cluster.draft_placement=own` and the loop on the target (`runtime.loop=target`), the draft
actor serves its `DraftModel` on a socket of its own (`DraftServer`, started by `ModelHost.serve_draft`)
and rank 0's loop drives it through a `DraftClient`, which has the engine's `Drafter` methods. A round
then makes no Ray call: each call is one pickled message over a local or TCP socket (tens of
microseconds for a round's tokens), and the calls that return nothing (`runtime.calls`: `prefill`,
`commit`, `retain`, `speculate`) are sent without waiting, so the draft works while the loop goes on:
drafting the next round ahead (`drafting.ahead`) runs while the target scores this one. A call that
waits (`propose`, `conditions`, `cpu_seconds`) returns once the draft has run everything sent before it;
an error in a call that did not wait is raised by the next one that does. The draft's KV peak comes with
each proposal.

The door: the server listens on the loopback where the loop is on its node, else on its node's address
on the cluster's network (as Ray's own ports do), and serves only connections from the loop's address
that prove the key within `HANDSHAKE_S`, each tried in a thread of its own, so that a stray or silent
connection is dropped without delaying the loop's; the newest client proven is the one served (a
restarted loop actor connects again). The loop's side: connecting and every waited call have a timeout,
and while the draft runs calls it beats every `HEARTBEAT_S`, so a draft that says nothing for
`SILENCE_S` (its process or node gone or frozen) or gives no answer within the call timeout (alive but
stuck) raises `DraftLost`, as a socket that closes under a call does (the draft actor died); the driver
then restarts the draft's group alone and decodes the unit again (`runtime.served.ServedDraftLoop`).

Each reply to `propose` carries the draft's busy seconds since the previous one (its model calls, timed
in its process): with the loop's wait on the draft (the engine's draft phase) they say how long each
side waited for the other.
"""

from __future__ import annotations

import os
import pickle
import secrets
import socket
import struct
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, replace
from multiprocessing import AuthenticationError
from multiprocessing.connection import Connection, answer_challenge, deliver_challenge
from typing import Any

import numpy as np
import torch

from speculab.drafting.sampling import SamplingParams
from speculab.drafting.tree import Proposal
from speculab.models import DraftModel
from speculab.models.roles import Conditions
from speculab.runtime.calls import semantics
from speculab.runtime.nested import mapped

ROLE = "draft"  # the role the channel carries (`runtime.calls.CALLS`)
LOOPBACK = "127.0.0.1"
HANDSHAKE_S = 10.0  # how long a connection has to prove the key (either side), and the client to connect
HEARTBEAT_S = 1.0  # how often a draft running calls says it is alive
SILENCE_S = 10.0  # a draft heard from neither by answer nor beat for this long is lost


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
    """Where a draft actor serves its model: an address, a port, the key a client must hold, and how long
    the loop waits for an answer (`runtime.collective_timeout_s`, as for a peer rank)."""

    host: str
    port: int
    key: bytes
    timeout_s: float


class DraftLost(RuntimeError):
    """The draft actor cannot be reached, closed its socket under a call, fell silent or is stuck in one."""


@dataclass(frozen=True)
class Failed:
    """A call's error, sent with the next reply."""

    error: BaseException


@dataclass(frozen=True)
class Beat:
    """The draft is alive and running calls (sent every HEARTBEAT_S while it does)."""


@dataclass(frozen=True)
class Proposed:
    """The reply to `propose`: the proposal, the draft's busy seconds since its last one, and its KV peak."""

    proposal: Proposal
    busy_s: float
    kv_bytes: int


def serving_host(own: str, client: str) -> str:
    """Where a draft on the node at `own` listens for the loop at `client`: the loopback where both are on
    one node (no other machine reaches it), else its node's address on the cluster's network."""
    return LOOPBACK if client in (own, LOOPBACK) else own


def socket_of(conn: Connection) -> socket.socket:
    """A socket object for `conn`'s socket (a duplicate descriptor: options set on it are conn's)."""
    return socket.socket(fileno=os.dup(conn.fileno()))


@contextmanager
def reads_within(conn: Connection, seconds: float) -> Iterator[None]:
    """Inside the block a read on `conn` that waits `seconds` fails (BlockingIOError): the key handshake's
    reads have no timeout of their own."""
    with socket_of(conn) as shared:
        limit = struct.pack("ll", int(seconds), int(seconds % 1 * 1_000_000))
        shared.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, limit)
        try:
            yield
        finally:
            shared.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", 0, 0))


def no_delay(conn: Connection) -> Connection:
    """`conn` sending each message at once: without TCP_NODELAY a small message after another waits for
    the peer's delayed acknowledgement (Nagle's algorithm: about 40 ms a round)."""
    with socket_of(conn) as shared:
        shared.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return conn


def hang_up(conn: Connection) -> None:
    """End `conn` for both sides: a thread blocked reading it wakes (closing alone would not wake it)."""
    with suppress(OSError), socket_of(conn) as shared:
        shared.shutdown(socket.SHUT_RDWR)
    conn.close()


class DraftServer:
    """Serves `draft` to the loop at `client` (an address, from the node at `own`), each call in the order
    sent, in a thread of the actor; `timeout_s` is the loop's wait for an answer."""

    def __init__(self, draft: DraftModel, own: str, client: str, timeout_s: float) -> None:
        self.draft, self.client = draft, client
        host = serving_host(own, client)
        self.peer = LOOPBACK if client in (own, LOOPBACK) else client  # the only address a connection comes from
        self.key = secrets.token_bytes(16)
        self.listener = socket.create_server((host, 0), backlog=8)
        self.address = DraftAddress(host, self.listener.getsockname()[1], self.key, timeout_s)
        self.lock = threading.Lock()  # one client taken at a time
        self.served: tuple[Connection, threading.Thread] | None = None
        threading.Thread(target=self.accepting, name="speculab-draft-door", daemon=True).start()

    def accepting(self) -> None:
        """Each connection from the loop's address tried in a thread of its own; ends when the server closes."""
        while True:
            try:
                sock, (peer, *_) = self.listener.accept()
            except OSError:
                return
            if peer != self.peer:
                sock.close()
                continue
            sock.setblocking(True)
            conn = Connection(sock.detach())
            threading.Thread(target=self.try_key, args=(conn,), name="speculab-draft-key", daemon=True).start()

    def try_key(self, conn: Connection) -> None:
        """Serve `conn` once it proves the key within HANDSHAKE_S; drop it otherwise."""
        try:
            with reads_within(conn, HANDSHAKE_S):
                deliver_challenge(conn, self.key)
                answer_challenge(conn, self.key)
        except (AuthenticationError, EOFError, OSError):
            conn.close()
            return
        self.take(no_delay(conn))

    def take(self, conn: Connection) -> None:
        """Serve `conn` from now on: the client served before is hung up, once its running call is over."""
        with self.lock:
            if self.served is not None:
                old, thread = self.served
                hang_up(old)
                thread.join()
            thread = threading.Thread(target=self.answer, args=(conn,), name="speculab-draft-server", daemon=True)
            self.served = conn, thread
            thread.start()

    def close(self) -> None:
        """Stop listening and hang up the client served."""
        with suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        if self.served is not None:
            hang_up(self.served[0])

    def answer(self, conn: Connection) -> None:
        """Run what the client sends until it hangs up: (method, args, kwargs) each."""
        lock = threading.Lock()  # a reply and a beat never interleave
        heart = Heartbeat(conn, lock)
        failed: BaseException | None = None
        busy = 0.0
        try:
            while True:
                try:
                    method, args, kwargs = received(conn)
                except (EOFError, OSError):
                    return
                start = time.perf_counter()
                value: Any = None
                with heart.running():
                    try:
                        waited = semantics(ROLE, method).waited
                        if failed is None:
                            value = getattr(self.draft, method)(*args, **kwargs)
                    except Exception as err:  # raised by the next call that waits
                        failed, waited = err, True
                busy += time.perf_counter() - start
                if not waited:
                    continue
                if failed is not None:
                    value, failed = Failed(failed), None
                elif method == "propose":
                    value, busy = Proposed(value, busy, self.draft.kv_bytes()), 0.0
                with lock, suppress(OSError):
                    sent(conn, value)
        finally:
            heart.stop()


class Heartbeat:
    """A Beat on `conn` every HEARTBEAT_S while the draft runs a call (`running`), from a thread of its own:
    the loop, waiting for an answer, tells a draft at work from one whose process or node is gone."""

    def __init__(self, conn: Connection, lock: threading.Lock) -> None:
        self.conn, self.lock = conn, lock
        self.busy, self.ended = threading.Event(), threading.Event()
        threading.Thread(target=self.beat, name="speculab-draft-heartbeat", daemon=True).start()

    @contextmanager
    def running(self) -> Iterator[None]:
        self.busy.set()
        try:
            yield
        finally:
            self.busy.clear()

    def beat(self) -> None:
        while not self.ended.wait(HEARTBEAT_S):
            if self.busy.is_set():
                try:
                    with self.lock:
                        sent(self.conn, Beat())
                except OSError:
                    return

    def stop(self) -> None:
        self.ended.set()


def connected(address: DraftAddress) -> Connection:
    """A connection to the draft served at `address`, its key proven both ways, within HANDSHAKE_S."""
    where = f"{address.host}:{address.port}"
    try:
        sock = socket.create_connection((address.host, address.port), timeout=HANDSHAKE_S)
        sock.settimeout(None)
        conn = Connection(sock.detach())
        with reads_within(conn, HANDSHAKE_S):
            answer_challenge(conn, address.key)
            deliver_challenge(conn, address.key)
    except (AuthenticationError, EOFError, OSError) as err:
        raise DraftLost(f"the draft actor at {where} did not let this loop in ({type(err).__name__}: {err})") from None
    return no_delay(conn)


class DraftClient:
    """The engine's drafter over a `DraftServer`: the calls that return nothing are sent without waiting."""

    def __init__(self, address: DraftAddress) -> None:
        self.conn = connected(address)
        self.timeout_s = address.timeout_s
        self.kv = 0  # the draft's KV peak as of its last proposal

    def _run(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Send `method`'s call; its answer where the caller waits for it (`runtime.calls`), else None."""
        waited = semantics(ROLE, method).waited
        try:
            sent(self.conn, (method, args, kwargs))
        except OSError as err:
            raise DraftLost(f"the draft actor's socket closed sending {method} ({type(err).__name__})") from None
        return self._answer(method) if waited else None

    def _answer(self, method: str) -> Any:
        """The answer to `method`, read past the draft's beats; DraftLost where the socket closes, the draft
        says nothing for SILENCE_S or no answer comes within the call timeout."""
        deadline = time.monotonic() + self.timeout_s
        heard = False  # a beat came: the draft's process is alive
        while True:
            left = deadline - time.monotonic()
            try:
                ready = left > 0 and self.conn.poll(min(SILENCE_S, left))
                value = received(self.conn) if ready else None
            except (EOFError, OSError) as err:
                raise DraftLost(
                    f"the draft actor's socket closed waiting for {method} ({type(err).__name__})"
                ) from None
            if not ready and time.monotonic() < deadline:
                raise DraftLost(
                    f"the draft actor said nothing for {SILENCE_S:g} s while {method} waited: gone or frozen"
                )
            if not ready:
                raise DraftLost(
                    f"the draft actor gave no answer to {method} within {self.timeout_s:g} s "
                    f"(runtime.collective_timeout_s){', though it beats' if heard else ''}: stuck"
                )
            if not isinstance(value, Beat):
                break
            heard = True
        if isinstance(value, Failed):
            raise value.error
        return value

    def prefill(
        self, contexts: list[list[int]], roots: list[int], seed: int, features: Any = None, room: int = 0
    ) -> None:
        self._run("prefill", contexts, roots, seed, features=features, room=room)

    def propose(self, num_paths: int, length: int, sampling: SamplingParams) -> Proposal:
        proposed: Proposed = self._run("propose", num_paths, length, sampling)
        self.kv = proposed.kv_bytes
        return replace(proposed.proposal, draft_busy_s=proposed.busy_s)

    def speculate(self, paths: torch.Tensor, fan: list[int], sampling: SamplingParams) -> None:
        self._run("speculate", paths, fan, sampling)

    def commit(self, emitted: list[list[int]], features: Any = None) -> None:
        self._run("commit", emitted, features=features)

    def retain(self, rows: torch.Tensor) -> None:
        self._run("retain", rows)

    def kv_bytes(self) -> int:
        """The draft's KV peak since its prefill, as of its last proposal (asked with no wait of its own)."""
        return self.kv

    def conditions(self) -> Conditions:
        result: Conditions = self._run("conditions")
        return result

    def cpu_seconds(self) -> float:
        """CPU seconds so far of the draft actor's process (once it ran every call sent before)."""
        result: float = self._run("cpu_seconds")
        return result

    def close(self) -> None:
        hang_up(self.conn)
