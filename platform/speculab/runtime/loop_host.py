"""The loop group's roles (`runtime.loop=target`): the decode loop beside the target, at any TP size.

The group has one rank per target shard (`cluster.tp_size`, one at TP = 1). Rank 0 is a `LoopHost`:
its shard behind a `tp_loop.Leader`, the draft model in the same process, and the current point's
`PointLoop`. Ranks 1.. are `PeerHost`s: a shard that follows rank 0 through each call the driver
makes. A sharded draft (`cluster.draft_placement=sharded`: the draft's `tp_size` is the target's) has a
shard on every rank as well, rank 0's behind a `Leader` of its own that announces through the same
`tp_loop.Announcer`, so that target and draft calls reach the peers in the one order rank 0 makes
them. A draft in an actor of its own (`cluster.draft_placement=own`) is not loaded here: rank 0
drives it over a socket (`runtime.draft_channel`), whose address the driver gives with each point.
The driver makes the same call on every rank (`runtime.proxy`): `start_point` when a point
starts (rank 0 builds the point's loop; the peers have nothing to do), then `decode_unit` and
`conditions`, during which the peers run every call rank 0 announces (the autoregressive
baseline as one announced decode). So a round makes no Ray call at any TP size, and TP = 1 is the
same loop with nobody to tell.
"""

from __future__ import annotations

from dataclasses import dataclass

from speculab.models import DraftModel, LMSpec, TreeTarget
from speculab.models.roles import Conditions
from speculab.runtime.loop import PointLoop, PointWork, UnitResult
from speculab.runtime.transport.draft_channel import DraftAddress, DraftClient
from speculab.runtime.transport.tp_loop import Announcer, Follower, Leader


@dataclass(frozen=True)
class LoopSpec:
    """The target (its `tp_size` ranks make the group) and the draft: whole in rank 0's process, or with
    the target's `tp_size`, a shard on each rank (loaded with the target's TP backend, in the same world)."""

    target: LMSpec
    draft: LMSpec
    draft_own: bool = False  # the draft in an actor of its own, which rank 0 drives over a socket: not loaded here

    def __post_init__(self) -> None:
        if self.draft.tp_size not in (1, self.target.tp_size):
            raise ValueError(
                f"a draft sharded in the loop group has the target's tp_size ({self.target.tp_size}); got "
                f"{self.draft.tp_size}"
            )

    @property
    def draft_sharded(self) -> bool:
        return self.draft.tp_size > 1

    @property
    def device(self) -> str:
        """`cuda` when either model is on the GPU Ray gives the actor."""
        return "cuda" if "cuda" in (self.target.device, self.draft.device) else "cpu"

    @property
    def feature_layers(self) -> tuple[int, ...]:
        return ()  # the target's features reach the draft inside rank 0's process, never through Ray

    @property
    def tp_backend(self) -> str:
        return self.target.tp_backend


class LoopHost:
    """Rank 0: the target shard (announcing its calls to the peers), the draft model (or its shard, also
    announcing) and the point's loop."""

    def __init__(self, target: Leader, draft: DraftModel | Leader | None) -> None:
        self.target, self.draft = target, draft  # draft None: in an actor of its own, reached by `start_point`
        self.announcer = target.announcer  # the draft's too, where it is sharded
        self.loop: PointLoop | None = None
        self.served: tuple[DraftAddress, DraftClient] | None = None

    def start_point(self, work: PointWork, draft: DraftAddress | None = None) -> None:
        """Make `work` the point the next `decode_unit` calls decode (a sweep reuses the loaded models),
        with the draft beside it or served at `draft` by an actor of its own (`runtime.draft_channel`).
        A decode's CPU time is every rank's (`cpu_seconds` is summed over them) and a draft actor's."""
        if draft is None:
            assert self.draft is not None, "a loop group whose draft is an actor of its own needs its address"
            self.loop = PointLoop(self.target, self.draft, work, self.target.cpu_seconds, self.target.autoregressive)
            return
        client = self._client(draft)

        def cpu() -> float:  # the draft actor's process decodes too
            return self.target.cpu_seconds() + client.cpu_seconds()

        self.loop = PointLoop(self.target, client, work, cpu, self.target.autoregressive)

    def _client(self, address: DraftAddress) -> DraftClient:
        """The client of the draft served at `address`: connected once, again where the actor changed."""
        if self.served is None or self.served[0] != address:
            if self.served is not None:
                self.served[1].close()
            self.served = address, DraftClient(address)
        return self.served[1]

    def _current(self) -> PointLoop:
        if self.loop is None:
            raise RuntimeError("decode_unit before start_point: the loop's actor has no point to decode")
        return self.loop

    def decode_unit(self, method: str, unit: int, repeat: int) -> UnitResult:
        with self.announcer.leading():
            return self._current().decode_unit(method, unit, repeat)

    def conditions(self) -> dict[str, Conditions]:
        with self.announcer.leading():
            return self._current().conditions()


class PeerHost:
    """Ranks 1..: a target shard (and a draft shard, where the draft is sharded) that runs what rank 0
    announces during the driver's calls."""

    def __init__(self, models: dict[str, TreeTarget | DraftModel]) -> None:
        self.follower = Follower(models)

    def start_point(self, work: PointWork, draft: DraftAddress | None = None) -> None:
        pass  # rank 0 calls no target method when a point starts

    def decode_unit(self, method: str, unit: int, repeat: int) -> None:
        self.follower.follow()

    def conditions(self) -> None:
        self.follower.follow()


def loop_role(spec: LoopSpec, rank: int, world: int) -> LoopHost | PeerHost:
    """Rank `rank` of the loop group of `world` ranks (each in the group's torch.distributed world already).
    Every rank loads its shards in the same order, target then draft: a shard's load makes collectives."""
    target = TreeTarget(spec.target)
    draft = DraftModel(spec.draft) if (rank == 0 and not spec.draft_own) or spec.draft_sharded else None
    if rank > 0:
        return PeerHost({"target": target} | ({"draft": draft} if draft is not None else {}))
    announcer = Announcer(world)
    return LoopHost(Leader(target, announcer), Leader(draft, announcer, "draft") if spec.draft_sharded else draft)
