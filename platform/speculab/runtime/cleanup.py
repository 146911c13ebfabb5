"""Releasing what any speculab job left on a Ray cluster.

Actors and placement groups of a job die with its driver (and `runtime.teardown` closes a driver's
own groups when its run ends); `python -m speculab.runtime.cleanup --address auto` removes what a
driver that is stuck, or still attached, left behind: every named actor and placement group in
`speculab-*` namespaces (or only `--namespace NS`). This module does not start models or touch MLflow.
"""

from __future__ import annotations

import argparse

import ray
from ray.util.placement_group import PlacementGroup, placement_group_table, remove_placement_group

from speculab.runtime.ray_actors import NAMESPACE_PREFIX


def remove_leftovers(namespace: str | None = None) -> tuple[int, int]:
    """Kill named actors and remove placement groups of speculab jobs; (actors, groups) removed."""

    def ours(ns: str) -> bool:
        return ns == namespace if namespace else ns.startswith(NAMESPACE_PREFIX)

    actors = [a for a in ray.util.list_named_actors(all_namespaces=True) if ours(a["namespace"])]
    for actor in actors:
        ray.kill(ray.get_actor(actor["name"], namespace=actor["namespace"]))
    groups = [
        pg_id
        for pg_id, info in placement_group_table().items()  # named "<namespace>:<group>"
        if info["state"] != "REMOVED" and ours(info["name"].split(":")[0])
    ]
    for pg_id in groups:
        remove_placement_group(PlacementGroup(ray.PlacementGroupID(bytes.fromhex(pg_id))))
    return len(actors), len(groups)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", default="auto", help="Ray cluster address (default: auto)")
    parser.add_argument("--namespace", default=None, help="only this namespace (default: every speculab-* one)")
    args = parser.parse_args(argv)
    ray.init(address=args.address, namespace="speculab-cleanup", log_to_driver=False)
    actors, groups = remove_leftovers(args.namespace)
    print(f"removed {actors} actor(s) and {groups} placement group(s)")
    ray.shutdown()


if __name__ == "__main__":
    main()
