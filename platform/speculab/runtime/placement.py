"""`ClusterError`, how a point fails when the cluster cannot hold it, and `EMBEDDED`, the placement of
a run that names no cluster. `Placement` itself is the config's (`speculab.config.cluster`): the plan
builds it from the `cluster.*` and `runtime.*` keys, and config stays below the runtime."""

from __future__ import annotations

from speculab.config.cluster import Placement


class ClusterError(RuntimeError):
    """The cluster cannot hold or keep what a point needs (a group that cannot be placed, a node lost
    with nowhere to go, restarts used up): the point ends FAILED with this one-line message, keeping
    what it finished, instead of a traceback."""


EMBEDDED = Placement()  # an embedded local Ray sized to this machine, one CPU an actor
