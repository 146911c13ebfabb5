"""Where the models and the decode loop live: in this process (`inline`) or in Ray actor groups (`ray`).

`start_loop` gives the point's loop wherever `RunPlan.loop` puts it: a `PointLoop` in this process
over inline models, or over Ray group proxies (`driver`: every model call of a round is a Ray
call), or the loop group's proxy (`target`: one actor holds both models and the loop, and the
driver makes one call per unit). `start_models` gives the role objects a loop in this process
drives; both have the methods of the protocols in `speculab.core.engine`, so the engine does not know
which runtime it drives. On Ray a model is always a group (`speculab.runtime.groups`): `tp_size`
ranks joined by torch.distributed when > 1, one plain actor when 1 (the same naming, placement,
reuse and restart path), placed as the plan's `Placement` says.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from speculab.config.cluster import OWN_DRAFT_GPU, Placement
from speculab.models import DraftModel, LMSpec, TreeTarget
from speculab.runtime.placement import EMBEDDED

Bundle = dict[str, float]  # a Ray bundle: resource -> amount

if TYPE_CHECKING:
    from speculab.runtime.loop import PointWork
    from speculab.runtime.transport.proxy import GroupProxy


def start_models(kind: str, target: LMSpec, draft: LMSpec, placement: Placement = EMBEDDED) -> tuple[Any, Any]:
    """(target, drafter) for runtime `kind` ("inline" or "ray"); target.tp_size ranks on Ray."""
    if kind == "inline":
        if target.tp_size > 1:
            raise ValueError(f"tensor parallelism (tp_size={target.tp_size}) needs runtime=ray")
        return TreeTarget(target), DraftModel(draft)
    from speculab.runtime.groups import POOL
    from speculab.runtime.ray_actors import connect
    from speculab.runtime.transport.proxy import GroupProxy

    p = placement
    connect(p.address, p.num_cpus)
    refuse_unoffered({"cluster.target_resources": p.target_resources, "cluster.draft_resources": p.draft_resources})
    target_bundle, draft_bundle = model_bundles(target, draft, p)
    from speculab.runtime.groups import group_name

    target_group = POOL.get(
        "target", target, target_bundle, p, frozenset({group_name("draft", draft, draft_bundle, p.replica)})
    )
    draft_group = POOL.get("draft", draft, draft_bundle, p, frozenset({target_group.name}))
    return GroupProxy(target_group, p.max_restarts), GroupProxy(draft_group, p.max_restarts)


def model_bundles(target: LMSpec, draft: LMSpec, p: Placement) -> tuple[list[Bundle], list[Bundle]]:
    """(the target group's bundles, the draft actor's) for a loop in the driver, each pinned as its field says."""
    from speculab.runtime.groups import draft_bundles, pinned, target_bundles

    target_bundle = pinned(target_bundles(target.tp_size, target.device, p.actor_cpus, p.draft_gpu), p.target_resources)
    return target_bundle, pinned(draft_bundles(draft.device, p.actor_cpus, p.draft_gpu), p.draft_resources)


def group_bundles(host: str, target: LMSpec, draft: LMSpec, placement: Placement) -> list[list[Bundle]]:
    """The bundles of each Ray group a point's loop uses (`RunPlan.loop` `host`): the loop group's alone
    ("target"), or the target's and the draft's ("driver"); what one replica of the point takes."""
    from speculab.runtime.groups import loop_bundles, pinned
    from speculab.runtime.loop_host import LoopSpec

    if host != "target":
        return list(model_bundles(target, draft, placement))
    if placement.draft_own:  # the loop group holds the target alone; the draft actor is the driver's
        device = LoopSpec(target, draft, draft_own=True).device
        loop = pinned(loop_bundles(device, placement.actor_cpus, target.tp_size), placement.target_resources)
        return [loop, model_bundles(target, draft, placement)[1]]
    bundles = loop_bundles(
        LoopSpec(target, draft).device, placement.actor_cpus, target.tp_size, draft.device == OWN_DRAFT_GPU
    )
    return [pinned(bundles, placement.target_resources)]


def fitting_copies(host: str, target: LMSpec, draft: LMSpec, placement: Placement, most: int) -> int:
    """How many copies of a point's groups (`group_bundles`) the alive nodes hold at once, at least 1 and
    at most `most` (`cluster.replicas=auto`)."""
    from speculab.runtime.nodes import cluster_nodes, copies
    from speculab.runtime.ray_actors import connect

    connect(placement.address, placement.num_cpus)
    return max(1, copies(group_bundles(host, target, draft, placement), cluster_nodes(), most))


def refuse_unoffered(pins: dict[str, dict[str, float]]) -> None:
    """Before any actor starts: every custom resource a group is pinned with (by its config field) is
    offered by some alive node, or ClusterError naming the field and what the nodes offer."""
    from speculab.runtime.nodes import cluster_nodes, unoffered
    from speculab.runtime.placement import ClusterError

    nodes = cluster_nodes()
    if errors := [e for field, resources in pins.items() if (e := unoffered(field, resources, nodes))]:
        raise ClusterError("; ".join(errors))


def start_loop(host: str, target: LMSpec, draft: LMSpec, work: PointWork, placement: Placement = EMBEDDED) -> Any:
    """The point's loop (`speculab.runtime.loop.PointLoop`'s `decode_unit` and `conditions`) for `host`
    (`RunPlan.loop`): in this process over inline models ("inline") or over Ray groups ("driver"), or
    in the target's actor with the draft beside it ("target": the loop group's proxy)."""
    from speculab.runtime.loop import PointLoop

    if host != "target":
        target_model, draft_model = start_models("inline" if host == "inline" else "ray", target, draft, placement)
        # On Ray the autoregressive baseline is one call to the target's ranks, as beside the target: a Ray
        # call a token would handicap the baseline every speedup is taken over.
        whole = target_model.autoregressive if host == "driver" else None
        return PointLoop(target_model, draft_model, work, lambda: cpu_seconds(target_model, draft_model), whole)
    from speculab.runtime.groups import POOL, group_name
    from speculab.runtime.loop_host import LoopSpec
    from speculab.runtime.ray_actors import connect
    from speculab.runtime.transport.proxy import GroupProxy

    connect(placement.address, placement.num_cpus)
    refuse_unoffered({"cluster.target_resources": placement.target_resources})
    bundles = group_bundles(host, target, draft, placement)
    spec = LoopSpec(target, draft, draft_own=placement.draft_own)
    draft_name = group_name("draft", draft, bundles[1], placement.replica) if placement.draft_own else ""
    loop = GroupProxy(POOL.get("loop", spec, bundles[0], placement, frozenset({draft_name})), placement.max_restarts)
    if not placement.draft_own:
        loop.start_point(work)
        return loop
    from speculab.runtime.served import ServedDraftLoop

    refuse_unoffered({"cluster.draft_resources": placement.draft_resources})
    draft_actor = POOL.get("draft", draft, bundles[1], placement, frozenset({loop.group.name}))
    draft_group = GroupProxy(draft_actor, placement.max_restarts)
    served = ServedDraftLoop(loop, draft_group, work)
    served.start()
    return served


def loop_groups(loop: Any) -> dict[str, GroupProxy]:
    """The Ray groups a loop from `start_loop` uses, by role (none inline)."""
    from speculab.runtime.loop import PointLoop

    if isinstance(loop, PointLoop):
        return proxies(target=loop.target, draft=loop.draft_model)
    served = sys.modules.get("speculab.runtime.served")  # imported where a draft actor of its own serves
    if served is not None and isinstance(loop, served.ServedDraftLoop):
        return {"loop": loop.loop, "draft": loop.draft}
    return {"loop": loop}


def proxies(**models: Any) -> dict[str, Any]:
    """The Ray group proxies among ``models`` (role -> model), by role (none inline)."""
    proxy = sys.modules.get("speculab.runtime.transport.proxy")  # never imported: no model is on Ray (nor Ray imported)
    return {} if proxy is None else {role: m for role, m in models.items() if isinstance(m, proxy.GroupProxy)}


def cpu_seconds(target: Any, drafter: Any) -> float:
    """CPU seconds so far of this process and of every rank of the Ray groups (counted per call
    they answered): what a decode costs in CPU, wherever its models live."""
    return time.process_time() + sum(p.stats.cpu_s for p in proxies(target=target, draft=drafter).values())


@contextmanager
def runtime_metrics(groups: dict[str, GroupProxy], replica: int = 0) -> Iterator[dict[str, float]]:
    """Fills a dict, on exit, with what the Ray runtime counted inside the block (inline: nothing).

    `groups` are the Ray groups in use by role (`loop_groups`), of copy `replica` of a sweep's groups.
    `restarts`: groups recreated after a lost actor; `model_loads`: that replica's group loads in this
    Ray job so far (a sweep that reuses its actors shows the same number at every point);
    `mem_peak_mb_<role>_<method>`: CUDA peak per call kind (the loop group's `decode_unit` holds both
    models and the loop); inline on a GPU, `mem_peak_mb_process`: this process's CUDA peak over the
    block (both models live in it).
    """
    import torch

    found: dict[str, float] = {}
    for proxy in groups.values():
        proxy.stats = type(proxy.stats)()  # counted afresh for this block
    cuda = not groups and torch.cuda.is_available() and torch.cuda.is_initialized()  # inline models on a GPU
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    yield found
    if cuda:
        found["mem_peak_mb_process"] = torch.cuda.max_memory_allocated() / 2**20
    if not groups:
        return
    from speculab.runtime.groups import POOL

    found["restarts"] = float(sum(p.stats.restarts for p in groups.values()))
    found["model_loads"] = float(POOL.model_loads(replica))
    for role, proxy in groups.items():
        for method, peak in proxy.stats.peak_bytes.items():
            found[f"mem_peak_mb_{role}_{method}"] = peak / 2**20
