"""`config.attach.ask_gcs`, the one function that calls Ray's private API, against the installed Ray: the
names it imports, called as it calls them, so that a Ray release that renames or reshapes one fails here
(a head that wants a token: tests/runtime/test_job_submission.py; no cluster at all: tests/test_config.py)."""

from __future__ import annotations

import inspect
import socket

import grpc
import pytest

from speculab.config.attach import ask_gcs


def test_the_private_names_ask_gcs_uses_exist_and_take_its_arguments() -> None:
    from ray._private import services
    from ray._private.grpc_utils import init_grpc_channel
    from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc

    inspect.signature(services.canonicalize_bootstrap_address).bind("auto")
    inspect.signature(init_grpc_channel).bind("127.0.0.1:1")
    request = gcs_service_pb2.GetClusterIdRequest()
    channel = grpc.insecure_channel("127.0.0.1:1")  # opens no connection until a call
    try:
        call = gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel).GetClusterId
        assert callable(call)
        inspect.signature(call).bind(request, timeout=1.0)
    finally:
        channel.close()


def closed_port() -> int:
    """A local port that nothing listens on (just freed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_auto_is_found_as_ray_finds_it_and_a_gcs_that_does_not_answer_is_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`auto` read from RAY_ADDRESS by Ray's own lookup (which names a local host by this machine's
    address), then the request over Ray's channel, for real."""
    port = closed_port()
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{port}")
    found, refused = ask_gcs("auto")
    assert found is not None and found.endswith(f":{port}") and refused == "UNAVAILABLE"
    assert ask_gcs(f"127.0.0.1:{port}") == (f"127.0.0.1:{port}", "UNAVAILABLE")
