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
line by line, randomness through ``decisions.Decisions``; ``get_reference(name)``) that
``verify.exact`` enumerates to certify losslessness; the batched implementations are tested to
agree with them.
"""

from __future__ import annotations

from functools import partial
from typing import Callable

from .block import block_verify, block_verify_reference, token_verify, token_verify_reference
from .exact import Reference
from .gbv import gbv_verify, gbv_verify_reference
from .greedy_block import greedy_block_verify, greedy_block_verify_reference
from .node_rules import NODE_RULES
from .traversal import traversal_verify, traversal_verify_reference
from .tree_walk import nss_verify, rowwise_walk_verify, specinfer_verify, spectr_verify, tree_walk_reference
from .verdict import Verdict
from .walk import walk  # deterministic trees (DDTree): walk(tree, p[B, N, V], rng=...) -> Verdict

Verifier = Callable[..., Verdict]

_REGISTRY: dict[str, Verifier] = {
    "token": token_verify,
    "block": block_verify,
    "greedy_block": greedy_block_verify,
    "gbv": gbv_verify,
    "spectr": spectr_verify,
    "specinfer": specinfer_verify,
    "nss": nss_verify,
    "traversal": traversal_verify,
}

_REFERENCES: dict[str, Reference] = {
    "token": token_verify_reference,
    "block": block_verify_reference,
    "greedy_block": greedy_block_verify_reference,
    "gbv": gbv_verify_reference,
    **{name: tree_walk_reference(rule) for name, rule in NODE_RULES.items()},
    "traversal": traversal_verify_reference,
}

VERIFIERS: tuple[str, ...] = tuple(_REGISTRY)
# Verifiers of deterministic draft trees (no i.i.d. paths): walk(tree, p [B, N, V], rng=...).
TREE_VERIFIERS: dict[str, Verifier] = {"ddtree": walk}

# Per-node rules of `spectr`'s top-down walk: K-SEQ (its own), the SpecInfer and NSS rules,
# and the optimal-transport solvers of the Global Resolution paper (App. R), run row by row.
_BATCHED_NODE_RULES: dict[str, Verifier] = {"kseq": spectr_verify, "specinfer": specinfer_verify, "nss": nss_verify}
OT_RULES = ("lp", "maxflow", "maxflow_opt", "global_resolution")
NODE_RULES_FOR_SPECTR: tuple[str, ...] = (*_BATCHED_NODE_RULES, *OT_RULES)


def get_verifier(name: str, node_rule: str = "kseq") -> Verifier:
    """The batched verifier registered under a config name (see ``VERIFIERS``).

    ``node_rule`` (one of ``NODE_RULES_FOR_SPECTR``) picks the per-node rule of ``spectr``.
    Names in ``TREE_VERIFIERS`` give a verifier of deterministic trees, ``(tree, p, rng=...)``.
    """
    if name not in _REGISTRY and name not in TREE_VERIFIERS:
        raise ValueError(f"algorithm.name={name!r}: must be one of {', '.join((*VERIFIERS, *TREE_VERIFIERS))}")
    if node_rule == "kseq":
        return _REGISTRY.get(name) or TREE_VERIFIERS[name]
    if name != "spectr":
        raise ValueError(f"algorithm.node_rule={node_rule!r}: only algorithm=spectr takes a node rule (others: kseq)")
    if node_rule in _BATCHED_NODE_RULES:
        return _BATCHED_NODE_RULES[node_rule]
    if node_rule in OT_RULES:
        from .ot import OT_NODE_RULES

        return partial(rowwise_walk_verify, rule=OT_NODE_RULES[node_rule])
    raise ValueError(f"algorithm.node_rule={node_rule!r}: must be one of {', '.join(NODE_RULES_FOR_SPECTR)}")


def get_reference(name: str) -> Reference:
    """The scalar reference of a registered verifier (the oracle of the exact certificates)."""
    get_verifier(name)
    return _REFERENCES[name]


__all__ = ["NODE_RULES_FOR_SPECTR", "TREE_VERIFIERS", "VERIFIERS", "Reference", "Verdict", "Verifier", "get_reference", "get_verifier"]
