"""`GroupProxy`: a model group used as if it were the plain role object, surviving lost actors.

Each call goes to every rank of the group in the same order (a TP group's ranks must see
identical forward and cache calls, or their collectives hang) and returns rank 0's result.
Calls that return nothing (`runtime.calls`: `commit`, `retain`, a draft's `prefill`) are submitted
without waiting; the next waiting call also waits on them, so their errors still surface.

Target features (DFlash): a target group whose spec names `feature_layers` runs `prefill`
and `commit` as split calls; the proxy returns the ObjectRef of rank 0's features without
fetching them (`commit` stays unwaited), and the engine passes it as the draft's `features`
keyword, which the draft actor receives resolved. The driver's Python never holds the tensor;
Ray stores it in the object store, or, below its inline threshold (100 KiB by default), in
the driver's object table, whence Ray's core worker forwards the bytes.

Shared groups: the pool hands one loaded group to every proxy of the same spec (a sweep's points).
Each proxy keeps the calls that made its state (`start_point`, or a batch since its `prefill`), and
a call through a proxy that was not the group's last user replays them first: two proxies used in
turn each decode their own point.

Faults: when any rank of a group dies, the whole group is torn down and created again, and
the calls since the current batch's `prefill` are replayed on it, so the interrupted
prompts restart from their prompt while finished ones are kept and the engine never
notices. Replayed calls are deterministic (the drafter reseeds at prefill), so a run with
a restart produces the same tokens as one without. A loop group (the loop beside the target)
replays its point's `start_point` and decodes the interrupted unit again (`decode_unit` is
self-contained and seeded by its unit). Each restart is logged and counted.

Time split: the driver's time blocked in a group's calls, less the ranks' own compute
time for the calls it waited on (clamped at zero per wait), is Ray's share (scheduling,
serialisation, transfer): `ProxyStats.ray_s`.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

import ray
from ray.exceptions import RayActorError, RayTaskError

from speculab.process import jobs
from speculab.runtime.calls import semantics
from speculab.runtime.groups import ActorGroup
from speculab.runtime.placement import ClusterError
from speculab.runtime.ray_actors import PER_RANK, Reply
from speculab.runtime.transport.draft_channel import DraftLost

log = logging.getLogger(__name__)

# Methods whose effects no later call depends on: not replayed after a restart (only resubmitted
# when it interrupted them). A loop group's `decode_unit` starts from its unit's prompts and seed, the
# autoregressive baseline from its prompts.
SELF_CONTAINED = frozenset({"kv_bytes", "hf_generate", "conditions", "decode_unit", "autoregressive"})
# Methods that reset a group's state: nothing submitted before them needs replaying.
RESETS = frozenset({"prefill", "start_point", "autoregressive"})
# What a call raises on rank 0 outside the group's collectives: the peers were released (`tp_loop.Announcer.
# leading`), so the group stays whole. A draft actor lost under the loop's rank 0 is restarted alone.
PEERS_RELEASED = (DraftLost,)
# Target methods whose value (the features a DFlash drafter needs) stays in Ray for the draft actor.
SPLIT = frozenset({"prefill", "commit"})


@dataclass(frozen=True)
class Call:
    method: str
    args: tuple
    kwargs: dict


@dataclass
class ProxyStats:
    ray_s: float = 0.0  # blocked in Ray calls minus the ranks' compute for them
    compute_s: float = 0.0  # rank 0's compute time of the calls waited on
    cpu_s: float = 0.0  # CPU seconds of every rank's process in the calls waited on
    calls: int = 0  # Ray calls submitted, one per rank and call
    restarts: int = 0
    peak_bytes: dict[str, int] = field(default_factory=dict)  # method -> CUDA peak over ranks


LOST_RANK_WAIT_S = 10.0  # how long a failed rank's peers get to show that one of them died


def lost_rank(refs: list[Any]) -> RayActorError | None:
    """The error of a rank among `refs` whose actor died, waiting up to LOST_RANK_WAIT_S for Ray to
    notice; None when every rank that finished lives (the others may wait in a collective forever)."""
    ready, _ = ray.wait(refs, num_returns=len(refs), timeout=LOST_RANK_WAIT_S, fetch_local=False)
    for ref in ready:
        try:
            ray.get(ref)
        except RayActorError as err:
            return err
        except RayTaskError:
            continue
    return None


class GroupProxy:
    """Calls the methods of a model group's role (TreeTarget or DraftModel) on all its ranks."""

    def __init__(self, group: ActorGroup, max_restarts: int) -> None:
        self.group = group
        self.max_restarts = max_restarts
        self.stats = ProxyStats()
        self.batch_calls: list[Call] = []  # state-changing calls since the last reset (prefill, start_point)
        self.in_flight: list[tuple[str, list[Any]]] = []  # (method, one reference per rank)

    def __getattr__(self, method: str) -> Any:
        if method.startswith("_"):
            raise AttributeError(method)
        return lambda *args, **kwargs: self._call(Call(method, args, kwargs))

    def _call(self, call: Call) -> Any:
        if call.method in RESETS:
            self.batch_calls = []  # nothing before a reset matters
        elif self.group.holder is not self:
            # The pool's group is shared: another proxy's calls (a later point's `start_point`) made its
            # state since this proxy's last call; replay this proxy's own first.
            self._replay()
        self.group.holder = self
        if call.method not in SELF_CONTAINED:
            self.batch_calls.append(call)
        value = self._submit(call)
        if not semantics(self.group.role, call.method).waited:
            return value
        while True:
            try:
                result = self._wait()
                return result if value is None else value
            except RayActorError as err:
                self.restart(err)
                value = self._resubmit(call)
            except RayTaskError as err:  # the call itself failed (`_wait` tells it from a lost peer's echo)
                self.in_flight = []  # answered, if by an error: the next call must not wait on it again
                self._recreate_if_torn(err)
                raise

    def _resubmit(self, call: Call) -> Any:
        """On the recreated group, the calls of the interrupted batch, then `call` if it is not among them;
        the value of the last one submitted (`_submit`)."""
        value = self._replay()
        if call.method in SELF_CONTAINED:
            value = self._submit(call)
        return value

    def _replay(self) -> Any:
        """Submit again the calls that made this proxy's state; the last one's value (`_submit`)."""
        value = None
        for c in self.batch_calls:
            value = self._submit(c)
        return value

    def _recreate_if_torn(self, err: RayTaskError) -> None:
        """A call that failed on one rank of several can leave the others waiting in a collective that
        never completes: the group is recreated, so that the next call (a sweep's next point) finds it
        whole. One rank has nobody to wait for, and a failure outside the collectives (PEERS_RELEASED) leaves
        nobody waiting."""
        if self.group.size == 1 or isinstance(err, PEERS_RELEASED):
            return
        log.warning(
            "%s group %s: a call failed on a rank (%s); recreating all %d rank(s)",
            self.group.role,
            self.group.name,
            type(err.cause).__name__,
            self.group.size,
        )
        self.in_flight = []
        self.group.close()
        self.group.open()

    def _submit(self, call: Call) -> Any:
        """Submit on every rank; the ObjectRef of a split call's value (target features), else None."""
        split = call.method in SPLIT and bool(self.group.spec.feature_layers)
        replies, value = self.group.submit(call.method, call.args, call.kwargs, split)
        self.in_flight.append((call.method, replies))
        self.stats.calls += len(replies)
        return value

    def _wait(self) -> Any:
        """Wait on every call in flight; the last one's result (summed over ranks for PER_RANK)."""
        start = time.perf_counter()
        flat = [ref for _, refs in self.in_flight for ref in refs]
        pending = flat if self.group.size > 1 else []
        while pending:  # one at a time, so a dead rank raises even while the others hang in a collective
            ready, pending = ray.wait(pending, num_returns=1, fetch_local=False)
            try:
                ray.get(ready)
            except RayTaskError as err:  # a rank whose peer died fails in its collective: the death is the cause
                raise lost_rank(pending) or err from None
        values, size = ray.get(flat), self.group.size
        replies: list[list[Reply]] = [values[i : i + size] for i in range(0, len(values), size)]  # [call][rank]
        methods = [method for method, _ in self.in_flight]
        self.in_flight = []
        compute = sum(ranks[0].compute_s for ranks in replies)
        self.stats.ray_s += max(0.0, time.perf_counter() - start - compute)
        self.stats.compute_s += compute
        self.stats.cpu_s += sum(r.cpu_s for ranks in replies for r in ranks)
        for method, ranks in zip(methods, replies):
            peak = max(r.peak_bytes for r in ranks)
            if peak:
                self.stats.peak_bytes[method] = max(self.stats.peak_bytes.get(method, 0), peak)
        last = replies[-1]
        return sum(r.value for r in last) if methods[-1] in PER_RANK else last[0].value

    def restart(self, err: Exception) -> None:
        """Replace the whole group (a partial group is never used), or give up past max_restarts, or at
        once where the sweep's other replicas run (`cluster.replicas`): one of them takes the point now,
        rather than wait while this group is placed again (Ray counts a dead node alive for about 15 s).
        `err`: the lost actor's error (a draft actor's, rank 0's `DraftLost`: `runtime.served`)."""
        if jobs.current().give_up():  # decided once, for every replica at once (`jobs.Seat.give_up`)
            raise ClusterError(
                f"{self.group.role} group {self.group.name}: lost an actor ({type(err).__name__}); another "
                "replica of the sweep takes the point over"
            ) from err
        if self.stats.restarts >= self.max_restarts:
            raise ClusterError(
                f"{self.group.role} group {self.group.name}: lost an actor after "
                f"{self.stats.restarts} restarts (runtime.max_restarts)"
            ) from err
        self.stats.restarts += 1
        log.warning(
            "%s group %s lost an actor (%s); recreating all %d rank(s) and replaying %d call(s) "
            "of the interrupted batch (restart %d of at most %d)",
            self.group.role,
            self.group.name,
            type(err).__name__,
            self.group.size,
            len(self.batch_calls),
            self.stats.restarts,
            self.max_restarts,
        )
        self.in_flight = []
        self.group.close()
        self.group.open()
