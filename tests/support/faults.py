"""Faults injected at a chosen point of a decode, not on a timer: a timer races the decode it means
to interrupt (a fast unit finishes first, a slow start kills nothing that runs)."""

from __future__ import annotations

from typing import Any


def kill_when_in_flight(proxy: Any, victim: Any, method: str = "decode_unit") -> list[bool]:
    """Kill actor `victim` of `proxy`'s group the first time the proxy waits on a `method` call it has
    submitted: that call is in flight (queued on the actor or running), so it is the one the kill
    interrupts. Returns a list that holds True once the kill happened."""
    import ray

    wait, killed = proxy._wait, []

    def killing() -> Any:
        if not killed and any(name == method for name, _ in proxy.in_flight):
            ray.kill(victim)
            killed.append(True)
        return wait()

    proxy._wait = killing  # the instance's attribute shadows the method for this proxy only
    return killed
