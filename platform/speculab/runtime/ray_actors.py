"""The Ray actor `ModelHost` (one rank of a model group), and how this driver joins Ray (`connect`).

A `ModelHost` is a thin shell around the in-process roles (`TreeTarget`, `DraftModel`): it
joins its group's torch.distributed world when the group has several ranks, builds the role
from an `LMSpec` on its own side, and runs calls on it, returning the result (rank 0 only;
the ranks of a TP group compute the same thing) with its own compute time, so the driver
can tell Ray's transfer time from model time. `call_split` returns the value as a second
object instead (the target's features for a DFlash drafter): the driver hands its ObjectRef to
the draft actor without fetching it, and keyword arguments that are ObjectRefs arrive as
top-level arguments, which Ray resolves in the callee. Groups, placement and restarts are
`speculab.runtime.groups`' and `speculab.runtime.transport.proxy`'s business.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import ray
import torch

from speculab.config.attach import embedded_auth
from speculab.models import DraftModel, LMSpec, TreeTarget
from speculab.runtime.loop_host import LoopHost, LoopSpec, PeerHost, loop_role
from speculab.runtime.nested import mapped
from speculab.runtime.placement import ClusterError
from speculab.runtime.transport.draft_channel import DraftAddress, DraftServer
from speculab.runtime.transport.tp_loop import WHOLE, whole

Role = TreeTarget | DraftModel | LoopHost | PeerHost
# The role rank r of a group of n actors holds, built from its spec: one model's shard, or
# (runtime.loop=target) rank 0's target shard, the draft and the decode loop, or a peer's shard.
ROLES: dict[str, Callable[[Any, int, int], Role]] = {
    "target": lambda spec, rank, world: TreeTarget(spec),
    "draft": lambda spec, rank, world: DraftModel(spec),
    "loop": loop_role,
}
NAMESPACE_PREFIX = "speculab-"
# Results every rank reports (summed by the driver): each rank holds a slice of the KV heads.
PER_RANK = frozenset({"kv_bytes"})


def connect(address: str | None, num_cpus: int | None) -> None:
    """Attach to a running cluster, or start an embedded one sized to this machine.

    Each driver gets its own namespace, so the named actors of two jobs on one cluster never
    meet, and the leftovers of any job can be found by prefix (`speculab.runtime.cleanup`).
    """
    if ray.is_initialized():
        return
    namespace = NAMESPACE_PREFIX + uuid.uuid4().hex[:8]
    with own_sigterm():
        if address:
            try:
                ray.init(address=address, namespace=namespace, log_to_driver=True)
            except ConnectionError as err:  # `auto` with no cluster here, a head gone since validation
                raise ClusterError(f"cluster.address={address!r}: no Ray cluster to attach to ({err})") from None
        else:  # "local": a new cluster even where a `ray start` head runs (Ray would attach to it otherwise)
            prepare_auth(address)
            with quiet_auth_notice():
                ray.init(
                    address="local",
                    num_cpus=num_cpus or os.cpu_count(),
                    namespace=namespace,
                    include_dashboard=False,
                    log_to_driver=True,
                )


def joining(address: str | None) -> tuple[str, str]:
    """Where another process joins the cluster this driver is on, and in which namespace (a sweep's
    replica processes, `speculab.launch.replica_process`): a Ray client's `ray://` address as given, else the
    head's GCS address (an embedded cluster's too: its token is in the environment they inherit)."""
    context = ray.get_runtime_context()
    return (address if address and address.startswith("ray://") else context.gcs_address), context.namespace


def join(address: str, namespace: str) -> None:
    """Join the cluster at `address` in `namespace` (`joining`), keeping the process's SIGTERM handler."""
    with own_sigterm():
        ray.init(address=address, namespace=namespace, log_to_driver=True, logging_level=logging.WARNING)


def prepare_auth(address: str | None) -> None:
    """Give this process's environment, and so every process it starts from now on (a sweep's replicas:
    `speculab.launch.launcher` starts them before the cluster), what Ray needs to start the cluster at `address`
    or join it: an embedded cluster's token (`embedded_auth`); nothing for a running cluster's."""
    if not address:
        os.environ.update(embedded_auth(os.environ))


@contextmanager
def quiet_auth_notice() -> Iterator[None]:
    """Hide Ray's warning that it turned token authentication on for a new local cluster (its advice
    is how to turn it off); Ray's other auth messages, errors among them, still show."""
    notices = logging.getLogger("ray._private.authentication.authentication_token_setup")
    level = notices.level
    notices.setLevel(logging.ERROR)
    try:
        yield
    finally:
        notices.setLevel(level)


@contextmanager
def own_sigterm() -> Iterator[None]:
    """Keep the process's SIGTERM handler across ``ray.init``, which replaces it with Ray's (a
    `sys.exit`) chained behind abseil's failure handler: that one prints a C stack dump and
    aborts (exit 134) when shutting down takes over 3 s. The CLI's handler turns SIGTERM into
    Ctrl-C instead, so a run ends KILLED with exit 130 on Ray as inline."""
    if threading.current_thread() is not threading.main_thread():  # only the main thread sets handlers
        yield
        return
    handler = signal.getsignal(signal.SIGTERM)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, handler)


@dataclass(frozen=True)
class Reply:
    value: Any  # None on ranks > 0 (except PER_RANK methods)
    compute_s: float  # time inside the model call, on this rank
    peak_bytes: int  # CUDA peak allocated memory during the call (0 on CPU)
    cpu_s: float = 0.0  # CPU seconds of this rank's process (every thread) during the call


def on_host(value: Any) -> Any:
    """`value` with every tensor in it on the CPU: a model actor hands results to the driver, and
    target features to the object store, there, whatever its own device (the receiver takes them to
    its own). Tensors already on the CPU are not copied."""
    return mapped(value, lambda item: isinstance(item, torch.Tensor), lambda tensor: tensor.cpu())


class ModelHost:
    """Rank `rank` of a group of `world` actors holding one model role."""

    def __init__(self, rank: int, world: int) -> None:
        self.rank, self.world = rank, world
        self.role: Role | None = None
        self.server: DraftServer | None = None

    def serve_draft(self, client: str, timeout_s: float) -> DraftAddress:
        """Serve this actor's draft model on a socket to the loop on the target's rank 0, on the node at
        `client` (`runtime.draft_channel`); the same server for every point, while the loop stays there."""
        assert isinstance(self.role, DraftModel), "only a draft actor serves its model"
        if self.server is None or self.server.client != client:
            if self.server is not None:
                self.server.close()
            self.server = DraftServer(self.role, self.node_address(), client, timeout_s)
        return self.server.address

    def node_address(self) -> str:
        """This actor's node's address on the cluster's network, as Ray knows it."""
        return ray.util.get_node_ip_address()

    def endpoint(self) -> tuple[str, int]:
        """(node IP, free port) for the group's rendezvous (asked of rank 0)."""
        with socket.socket() as s:
            s.bind(("", 0))
            return self.node_address(), s.getsockname()[1]

    def is_loaded(self) -> bool:
        return self.role is not None

    def load(self, role: str, spec: LMSpec | LoopSpec, address: str, port: int, timeout_s: float) -> None:
        """Join the group's world (if several ranks; its collectives wait `timeout_s` for a peer), then
        load the model; all ranks concurrently."""
        if spec.device == "cuda":
            torch.cuda.set_device(0)  # Ray shows this actor only its own GPU
        if self.world > 1:
            from speculab.models.tp import join_process_group

            join_process_group(self.rank, self.world, address, port, spec.device, timeout_s, spec.tp_backend)
        self.role = ROLES[role](spec, self.rank, self.world)

    def call(self, method: str, args: tuple, kwargs: dict, ref_names: tuple[str, ...] = (), *resolved: Any) -> Reply:
        """role.method(*args, **kwargs), plus `ref_names` bound to the top-level arguments after them
        (ObjectRefs the caller passed, resolved by Ray before this runs)."""
        cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        run = partial(whole, method, self.role) if method in WHOLE else getattr(self.role, method)
        start, cpu = time.perf_counter(), time.process_time()
        value = on_host(run(*args, **kwargs, **dict(zip(ref_names, resolved))))
        if cuda:
            torch.cuda.synchronize()
        compute, cpu = time.perf_counter() - start, time.process_time() - cpu
        keep = self.rank == 0 or method in PER_RANK
        return Reply(value if keep else None, compute, torch.cuda.max_memory_allocated() if cuda else 0, cpu)

    @ray.method(num_returns=2)
    def call_split(
        self, method: str, args: tuple, kwargs: dict, ref_names: tuple[str, ...] = (), *resolved: Any
    ) -> tuple[Reply, Any]:
        """`call`, with the value as its own object (rank 0's; None elsewhere) and the Reply without it."""
        reply = self.call(method, args, kwargs, ref_names, *resolved)
        return replace(reply, value=None), reply.value
