"""`cluster.address`: attaching to a running Ray cluster. The address in a form Ray takes (validation),
then, before a run or a sweep starts, a head that answers and lets this user in (Ray's token
authentication): Ray's own connect loop retries for about 20 s, a line a second, and ends in "no
cluster" even where a cluster answered but wanted a token. A plan (`--plan`, or validating a preset
cluster's config) needs no cluster to answer."""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from urllib.parse import urlparse

from speculab.config.cluster import ClusterView

ADDRESS_TIMEOUT_S = 5.0  # how long an address gets to answer before a run or a sweep starts
ADDRESS_FORMS = "null (an embedded local Ray), auto, host:port (a head's GCS port, 6379 by default) or ray://host:port"
TOKEN_HELP = (
    "on its head run `ray get-auth-token`, then RAY_AUTH_TOKEN=<token> speculab ... (or RAY_AUTH_TOKEN_PATH=<file>), "
    "or start a head of your own (docs/runtime.md#job-submission)"
)


def token_kept(environ: Mapping[str, str], home: Path) -> bool:
    """Whether Ray keeps a token for this user: RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token
    (where `ray get-auth-token --generate` writes it), the places Ray's clients read it from."""
    return bool(
        environ.get("RAY_AUTH_TOKEN") or environ.get("RAY_AUTH_TOKEN_PATH") or (home / ".ray" / "auth_token").exists()
    )


def token_mode(environ: Mapping[str, str], home: Path) -> dict[str, str]:
    """RAY_AUTH_MODE=token where the user left the mode unset and Ray keeps a token: a head started with
    that file takes token mode by itself, but Ray's clients send the token only in token mode. Ray reads
    the mode when it is imported, so a process sets this before its first `import ray` (`launch.cli.main`,
    `jobs/submit.py`)."""
    return {"RAY_AUTH_MODE": "token"} if "RAY_AUTH_MODE" not in environ and token_kept(environ, home) else {}


def attach_env(cfg: ClusterView, environ: Mapping[str, str], home: Path) -> dict[str, str]:
    """What a run on Ray sets in its environment before Ray reads it (`launch.cli.precheck`): `token_mode` where it
    attaches to a running cluster, `embedded_auth` where it starts one of its own."""
    if cfg.runtime.kind != "ray":
        return {}
    return token_mode(environ, home) if cfg.cluster.address else embedded_auth(environ)


def embedded_auth(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment that gives an embedded cluster a token of its own: token authentication, named
    (Ray would turn it on for a new local cluster only in the process that starts it, after any process
    started before it, a sweep's replica, read its mode), with the token in `RAY_AUTH_TOKEN`, which the
    raylet, GCS and workers inherit, so the cluster refuses other local users' calls and nothing is
    written to `~/.ray/auth_token` (Ray's default writes it and says so). Where the user chose Ray's
    auth mode or token, theirs stand."""
    if "RAY_AUTH_MODE" in environ or "RAY_AUTH_TOKEN" in environ:
        return {}
    return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}


def address_errors(cfg: ClusterView) -> list[str]:
    """A cluster address in a form Ray accepts (what validation checks: a plan for a cluster this machine
    is not attached to is still valid; whether its head answers is `attach_errors`')."""
    address = cfg.cluster.address
    return list(form_errors(address)) if cfg.runtime.kind == "ray" and address and address != "auto" else []


def attach_errors(cfg: ClusterView) -> list[str]:
    """Before a run or a sweep starts: the head at the cluster address answers within ADDRESS_TIMEOUT_S and
    lets this user in; `auto` is first looked up as Ray looks it up (RAY_ADDRESS, the last `ray start`, a
    running GCS), so "no cluster here" and "a cluster that wants a token" are told apart."""
    address = cfg.cluster.address
    return list(reach_errors(address)) if cfg.runtime.kind == "ray" and address else []


def gcs_host_port(address: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) of a `host:port` or `ray://host:port` address; None for another form."""
    parsed = urlparse(address if "://" in address else f"gcs://{address}")
    try:
        host, port = parsed.hostname, parsed.port or (10001 if parsed.scheme == "ray" else None)  # Ray client's default
    except ValueError:  # a port that is not a number
        return None
    if parsed.scheme not in ("ray", "gcs") or not host or not port or parsed.path not in ("", "/"):
        return None
    return parsed.scheme, host, port


def form_errors(address: str) -> tuple[str, ...]:
    return (
        ()
        if gcs_host_port(address) is not None
        else (f"cluster.address={address!r}: not a Ray address; use {ADDRESS_FORMS}",)
    )


@cache  # a sweep's points share the address (`config.replicas.SWEEP_WIDE`): asked once a process
def reach_errors(address: str) -> tuple[str, ...]:
    """`attach_errors` for one address: its form, then its head."""
    if address == "auto":
        return tuple(head_errors(address, "auto"))
    if (found := gcs_host_port(address)) is None:
        return form_errors(address)
    scheme, host, port = found
    try:
        socket.create_connection((host, port), timeout=ADDRESS_TIMEOUT_S).close()
    except OSError as err:
        return (
            f"cluster.address={address!r}: nothing answers at {host}:{port} within {ADDRESS_TIMEOUT_S:g} s "
            f"({err.strerror or err}); start the cluster's head or fix the address",
        )
    return () if scheme == "ray" else tuple(head_errors(address, f"{host}:{port}"))


def head_errors(address: str, gcs: str) -> list[str]:
    """The head's GCS at `gcs` (`auto`: found as Ray finds it) lets this user in: "no cluster here" and
    "a cluster that wants a token" said apart, each at once."""
    found, refused = ask_gcs(gcs)
    if found is None:
        return [
            "cluster.address='auto': no Ray cluster runs on this machine (Ray looks at RAY_ADDRESS, the last "
            "`ray start` and running GCS processes); start a head (docs/runtime.md#job-submission), name one as "
            "host:port, or leave cluster.address null for an embedded cluster"
        ]
    if refused is None:
        return []
    if refused == "UNAUTHENTICATED":
        given = "the token Ray keeps for you is not its" if token_kept(os.environ, Path.home()) else "none is set"
        return [f"cluster.address={address!r}: the Ray cluster at {found} needs its token and {given}; {TOKEN_HELP}"]
    return [f"cluster.address={address!r}: the Ray head at {found} does not answer ({refused}); start it"]


def ask_gcs(gcs: str) -> tuple[str | None, str | None]:
    """What `ray.init` does first, without its 20 s of retries: the GCS address (`auto`: looked up as Ray
    looks it up, in RAY_ADDRESS, the last `ray start` and the running GCS processes; None where none is
    found), and the name of the gRPC status its GCS answered a request for the cluster id with, sent over
    the channel `ray.init` opens, token included (None: it answered). Ray has no public call for either,
    so its private API is used here alone; `tests/test_attach.py` checks the names and signatures used
    against the installed Ray."""
    import grpc
    from ray._private import services
    from ray._private.grpc_utils import init_grpc_channel
    from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc

    if gcs == "auto":
        try:
            found = services.canonicalize_bootstrap_address("auto")
        except ConnectionError:
            found = None
        if found is None:
            return None, None
        gcs = found
    channel = init_grpc_channel(gcs)
    try:
        gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel).GetClusterId(
            gcs_service_pb2.GetClusterIdRequest(),  # type: ignore[attr-defined]  # generated without stubs
            timeout=ADDRESS_TIMEOUT_S,
        )
    except grpc.RpcError as err:
        return gcs, err.code().name
    finally:
        channel.close()
    return gcs, None
