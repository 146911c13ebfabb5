"""Verification algorithms for speculative decoding: pure tensor functions, no I/O.

Vocabulary (used with exactly these meanings in names, tests and metrics):

- **draft**: the K i.i.d. paths of L tokens the drafter proposed (``paths [B, K, L]``), with
  the draft distributions q that produced them and the target distributions p along them.
- **accepted** tokens: the prefix of one drafted path that the verifier keeps; its length is
  **tau** (0 <= tau <= L).
- **correction** token: the extra token sampled from a residual distribution when tau < L.
- **bonus** token: the extra token sampled from the target when the whole path is accepted.
- **extra** token: the correction or the bonus token; every round emits tau + 1 tokens.
- **carry**: state a verifier hands to the next round (greedy block verification and SpecTr-GBV
  modify the target distribution of the next round's first positions). The engine passes it
  back untouched; it is ``None`` or a dataclass with ``select(rows)``.
- **lossless**: the emitted tokens, extended by sampling the (possibly modified) target, are
  distributed exactly as target sampling (the papers' target matching).

Entry point (the contract the engine and benchmarks code against)::

    verdict = get_verifier("block")(paths, p, q, rng=generator, carry=None)

with ``paths [B, K, L]`` int64, ``p [B, K, L+1, V]`` target probabilities at each path position
(root first), ``q [B, K, L, V]`` draft probabilities, all randomness from ``rng``. The result is
a ``Verdict``: ``tokens [B, L+1]`` (accepted tokens, then the extra token, padded with -1),
``num_tokens [B]`` (tau + 1), ``path [B]`` and ``carry``.

Every algorithm also has a scalar reference implementation (one prompt, following its paper
line by line, randomness through ``decisions.Decisions``) that ``verify.exact`` enumerates to
certify losslessness; the batched implementations are tested to agree with them.
"""

from __future__ import annotations

from typing import Callable

from .block import block_verify, token_verify
from .gbv import gbv_verify
from .greedy_block import greedy_block_verify
from .verdict import Verdict

Verifier = Callable[..., Verdict]

_REGISTRY: dict[str, Verifier] = {
    "token": token_verify,
    "block": block_verify,
    "greedy_block": greedy_block_verify,
    "gbv": gbv_verify,
}

VERIFIERS: tuple[str, ...] = tuple(_REGISTRY)


def get_verifier(name: str) -> Verifier:
    """The batched verifier registered under a config name (see ``VERIFIERS``)."""
    if name not in _REGISTRY:
        raise ValueError(f"unknown verifier {name!r}; choose one of {', '.join(VERIFIERS)}")
    return _REGISTRY[name]


__all__ = ["VERIFIERS", "Verdict", "Verifier", "get_verifier"]
