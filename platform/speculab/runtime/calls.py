"""What each call of a model role asks of its caller: one table for the three ways a call travels.

A role's calls reach it over Ray (`runtime.proxy`: a group's ranks, from the driver), over a group's
torch.distributed world (`runtime.tp_loop`: rank 0 telling its peers) or over a socket
(`runtime.draft_channel`: rank 0 driving a draft actor of its own). Each transport reads here whether
the caller waits for a call's answer (a call that returns nothing is sent without waiting: the other
side runs its calls in order, and an error in one is raised by the next call that waits) and whether a
sharded model's ranks meet in collectives inside it (a forward pass: announced at once; a cache edit
rides with the next announcement). A method missing from the table is refused where it is called
(`semantics`), never sent unwaited by default: a caller waiting for an answer the other side never
sends would hang.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Semantics:
    waited: bool  # the caller needs its answer before it goes on
    collective: bool  # a sharded model's ranks make collectives in it


ANSWERED = Semantics(waited=True, collective=True)
SENT = Semantics(waited=False, collective=True)  # runs the model, returns nothing
EDIT = Semantics(waited=False, collective=False)  # a cache edit: no pass, nothing returned

# By role (a group's: `runtime.groups.ActorGroup.role`; a shard's: `tp_loop.Call.role`), each method's.
# A target's `commit` returns its features (DFlash) as a Ray object the caller passes on unread.
CALLS: dict[str, dict[str, Semantics]] = {
    "target": {
        "prefill": ANSWERED,
        "score": ANSWERED,
        "commit": EDIT,
        "retain": EDIT,
        "kv_bytes": ANSWERED,
        "cpu_seconds": ANSWERED,
        "conditions": ANSWERED,
        "hf_generate": ANSWERED,
        "autoregressive": ANSWERED,
    },
    "draft": {
        "prefill": SENT,
        "propose": ANSWERED,
        "speculate": SENT,
        "marginals": ANSWERED,
        "commit": EDIT,
        "retain": EDIT,
        "kv_bytes": ANSWERED,
        "cpu_seconds": ANSWERED,
        "conditions": ANSWERED,
    },
    "loop": {"start_point": ANSWERED, "decode_unit": ANSWERED, "conditions": ANSWERED},
}


def semantics(role: str, method: str) -> Semantics:
    """`method`'s semantics for `role`; AttributeError naming the table where it has none."""
    try:
        return CALLS[role][method]
    except KeyError:
        raise AttributeError(f"{role} has no call {method!r} (runtime.calls.CALLS lists each role's)") from None
