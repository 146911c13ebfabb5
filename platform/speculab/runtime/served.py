"""The loop group with its draft in an actor of its own (`cluster.draft_placement=own`, the loop on the
target's rank 0): a unit whose draft actor died is decoded again on a restarted draft.

Rank 0 drives the draft actor over a socket (`runtime.draft_channel`), so Ray never sees a call to it
fail: the loop's `decode_unit` fails instead, with `DraftLost`. The draft's group is then restarted as a
group that lost a rank is (`GroupProxy.restart`: given up past `runtime.max_restarts`, or at once where
another replica of the sweep can take the point), served again, and the unit decoded again from its
prompts: `decode_unit` is self-contained and seeded by its unit, so the tokens are those of a decode
without the loss, and the units finished before it are kept.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import ray

from speculab.runtime.loop import UnitResult
from speculab.runtime.transport.draft_channel import DraftAddress, DraftLost
from speculab.runtime.transport.proxy import GroupProxy


def serve(draft: GroupProxy, loop: GroupProxy) -> DraftAddress:
    """Where the draft group's one actor serves its model to the loop group's rank 0, and to it alone (it
    starts serving on the first ask); a call waits on it as long as on a peer rank."""
    (actor,) = draft.group.members
    client = ray.get(loop.group.members[0].node_address.remote())
    address: DraftAddress = ray.get(actor.serve_draft.remote(client, draft.group.placement.collective_timeout_s))
    return address


@dataclass
class ServedDraftLoop:
    """`decode_unit` and `conditions` of the loop group (`speculab.runtime.loop.PointLoop`'s), whose rank 0 drives
    the draft group's actor; `work` is the point it decodes (`PointWork`)."""

    loop: GroupProxy
    draft: GroupProxy
    work: Any

    def start(self) -> None:
        self.loop.start_point(self.work, draft=serve(self.draft, self.loop))

    def decode_unit(self, method: str, unit: int, repeat: int) -> UnitResult:
        while True:
            try:
                result: UnitResult = self.loop.decode_unit(method, unit, repeat)
                return result
            except DraftLost as lost:
                self.draft.restart(lost)
                self.start()

    def conditions(self) -> Any:
        return self.loop.conditions()
