"""The suite's own Ray token authentication, so that no test depends on a user's `~/.ray`.

Ray reads its auth mode once per process and its token from `RAY_AUTH_TOKEN`, `RAY_AUTH_TOKEN_PATH` or
`~/.ray/auth_token`. Left unset, the mode a process first read stays while something later sets it
(`jobs/submit.py` sets `RAY_AUTH_MODE=token` when it imports and the user keeps a token, as after
`ray get-auth-token --generate`): a cluster the suite starts afterwards then wants a token its own
driver does not send. So the suite sets both before anything reads them, and every cluster it starts
(the session's embedded one, `ray.cluster_utils.Cluster`, a `ray start` head, a CLI run's) inherits them.
"""

from __future__ import annotations

import os
import secrets

AUTH_KEYS = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN")


def own_auth() -> None:
    """Token mode with a token of this test session, for this process and every one it starts."""
    os.environ.update({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)})
    os.environ.pop("RAY_AUTH_TOKEN_PATH", None)


def suite_auth() -> dict[str, str]:
    """The session's auth settings (`own_auth`), for a cluster started with an environment of its own."""
    return {key: os.environ[key] for key in AUTH_KEYS}
