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

The contracts (`verify.contracts`): a `PathVerifier` takes ``paths [B, K, L]`` int64,
``p [B, K, L+1, V]`` target probabilities at each path position (root first) and
``q [B, K, L, V]`` draft probabilities, with all randomness from ``rng``; a `TreeVerifier`
takes a deterministic ``DraftTree`` and ``p [B, N, V]`` at its nodes. Both return a
``Verdict``: ``tokens [B, L+1]`` (accepted tokens, then the extra token, padded with -1),
``num_tokens [B]`` (tau + 1), ``path [B]`` and ``carry``. The registry of algorithms
(`speculab.registry`: ``get_verifier("block")``) hands them out behind one shape check.

Every algorithm also has a scalar reference implementation (one prompt, following its paper
line by line, randomness through ``decisions.Decisions``) that ``verify.exact`` enumerates to
certify losslessness; the batched implementations are tested to agree with them.
"""

from .contracts import ContractError, PathVerifier, TreeVerifier
from .verdict import Verdict

__all__ = ["ContractError", "PathVerifier", "TreeVerifier", "Verdict"]
