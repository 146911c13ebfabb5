"""The algorithm registry: what the platform knows about each decoding algorithm and drafter.

One `AlgorithmSpec` per `algorithm=` name (its batched verifier, scalar reference, the
drafters it accepts, whether it takes K > 1, a node rule, a tree builder, a carry, whether it
is lossless, and its paper) and one `DrafterSpec` per `drafter=` name. `config.validate`, the
experiment, the benchmarks and the table in docs/algorithms.md (`python -m speculab.registry`
prints it) all read these tables; nothing else branches on an algorithm's name. Adding an
algorithm is one entry here plus its module under `speculab.verify`.

Verifiers handed out by `get_verifier` are wrapped in the shape check of
`speculab.verify.contracts`; the references are the oracles of the exact certificates
(`speculab.verify.exact`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal, cast

from speculab.drafting.ddtree import CHAIN
from speculab.verify.block import block_verify, block_verify_reference, token_verify, token_verify_reference
from speculab.verify.contracts import (
    DrawnPathVerifier,
    PathVerifier,
    TreeVerifier,
    checked_path_verifier,
    checked_tree_verifier,
)
from speculab.verify.ddtree_walk import ddtree_walk, ddtree_walk_reference
from speculab.verify.exact import Reference
from speculab.verify.gbv import gbv_verify, gbv_verify_reference
from speculab.verify.greedy_block import greedy_block_verify, greedy_block_verify_reference
from speculab.verify.multidraft_walk import (
    multidraft_walk_reference,
    nss_verify,
    rowwise_walk_verify,
    specinfer_verify,
    spectr_verify,
)
from speculab.verify.node_rules import NODE_RULES
from speculab.verify.spectr_gbv import spectr_gbv_verify, spectr_gbv_verify_reference
from speculab.verify.traversal import traversal_verify, traversal_verify_reference


@dataclass(frozen=True)
class DrafterSpec:
    name: str
    proposes: Literal["paths", "marginals"]  # K i.i.d. paths with q, or per-depth marginals q [B, L, V]
    # the draft model of the pair, its own checkpoint, or its own if `drafter.path` is set, else the pair's
    weights: Literal["model.draft", "drafter.path", "drafter.path or model.draft"]
    backend: str  # the `LMSpec` backend that loads it ("" = the model's own backend)
    summary: str
    label: str  # its name in the papers' tables and the report
    marker: str = ""  # the file that marks its checkpoint dir (`drafter.path`)
    target_features: bool = False  # conditioned on the target's hidden features (`dflash_config`)
    # the file of its checkpoint that gives how many tokens one pass drafts (`config.drafter_checkpoint.block_length`):
    # block.json's block_size, or a DFlash config.json's block_size - 1; "": it drafts token by token
    block_file: str = ""
    # its marginals come with a candidate selector's law (`drafting.selector`): paths drawn from it carry
    # their q, so the path verifiers with i.i.d. paths take it too
    selector: bool = False
    # its method as the field's tools name it (specdec_bench's `method` in a speculation profile): what a
    # profile another tool wrote is matched against (`results.profile`)
    field_method: str = "draft_model"


DRAFTERS: dict[str, DrafterSpec] = {
    spec.name: spec
    for spec in (
        DrafterSpec(
            "iid", "paths", "model.draft", "", "the draft model samples K i.i.d. paths of L tokens", "i.i.d. draft"
        ),
        DrafterSpec(
            "ar_marginals",
            "marginals",
            "model.draft",
            "",
            "the draft model's distributions along its own greedy rollout (L passes)",
            "AR marginals",
        ),
        DrafterSpec(
            "parallel",
            "marginals",
            "drafter.path",
            "parallel",
            "a one-pass block drafter conditioned on the context only (one pass for L marginals)",
            "parallel drafter",
            marker="block.json",
            block_file="block.json",
            field_method="parallel",
        ),
        DrafterSpec(
            "dflash",
            "marginals",
            "drafter.path or model.draft",
            "dflash",
            "DFlash: a one-pass block drafter conditioned on target hidden features, with the target's "
            "embeddings and lm_head (the authors' checkpoint layout)",
            "DFlash",
            marker="config.json",
            target_features=True,
            block_file="config.json",
            field_method="dflash",
        ),
        DrafterSpec(
            "dflash2",
            "marginals",
            "drafter.path or model.draft",
            "dflash",
            "DFlash2: DFlash with a dynamic block convolution in every layer and a candidate selector that "
            "draws each token among the top K given the one before (vLLM's qwen3_dflash2 layout)",
            "DFlash2",
            marker="config.json",
            target_features=True,
            block_file="config.json",
            selector=True,
            field_method="dflash2",
        ),
    )
}


@dataclass(frozen=True)
class AlgorithmSpec:
    name: str
    label: str  # its name in the papers' tables and the report (GBV paper, App. L; BV paper, Table 4; ...)
    paper: str  # where its rule is defined (the papers of docs/algorithms.md)
    verifier: PathVerifier | TreeVerifier  # the batched verifier (unchecked; `get_verifier` checks)
    reference: Callable[..., Any]  # the scalar reference the exact certificates enumerate
    drafters: tuple[str, ...]  # accepted `drafter=` names, the first is the usual one
    multi_path: bool  # takes K > 1 i.i.d. paths
    carry: bool = False  # modifies the next round's target (Verdict.carry)
    lossless_paths: int | None = None  # the largest K certified lossless by exact enumeration (None: every K)
    node_rules: tuple[str, ...] = ()  # `algorithm.node_rule` choices, the first is the default
    tree_builder: bool = False  # verifies one deterministic tree per prompt (`algorithm.tree`, `algorithm.budget`)
    # whether depth j's verdict looks at depths 1..j only, so that tau is the longest accepted prefix and a
    # run at a shorter L accepts tau cut there (specdec_bench's `longest_prefix` verification)
    longest_prefix: bool = False

    def lossless(self, paths: int) -> bool:
        """Whether the exact certificates cover this algorithm with K = ``paths``."""
        return self.lossless_paths is None or paths <= self.lossless_paths


# the drafters whose paths carry their q: i.i.d. paths of a draft model, or walks of a selector's chain
PATH_DRAFTERS = tuple(name for name, d in DRAFTERS.items() if d.proposes == "paths" or d.selector)
MARGINAL_DRAFTERS = tuple(name for name, d in DRAFTERS.items() if d.proposes == "marginals")
# The carry verifiers' next-round target assumes the draft's law at a prefix is the same whichever round
# drafts it (an autoregressive draft model's); a block drafter's law depends on where its round starts, and
# exact enumeration shows greedy_block and spectr_gbv lossy on DFlash2's (tests/verify/test_selector_certificates.py)
SAMPLED_PATH_DRAFTERS = tuple(name for name, d in DRAFTERS.items() if d.proposes == "paths")
# token and block also verify one path drawn from per-depth marginals (`MarginalPathDrafter`: token j ~ q_j)
SINGLE_PATH_DRAFTERS = (*SAMPLED_PATH_DRAFTERS, *MARGINAL_DRAFTERS)

# spectr's per-node rules: K-SEQ (its own) and the SpecInfer and NSS rules, batched; the
# optimal-transport solvers of the Global Resolution paper (App. R), row by row.
_BATCHED_NODE_RULES: dict[str, PathVerifier] = {"kseq": spectr_verify, "specinfer": specinfer_verify, "nss": nss_verify}
OT_RULES = ("lp", "maxflow", "maxflow_opt", "global_resolution")
SPECTR_NODE_RULES: tuple[str, ...] = (*_BATCHED_NODE_RULES, *OT_RULES)
# The node rules as the papers name them (Global Resolution paper, App. R), in SPECTR_NODE_RULES' order.
NODE_RULE_LABELS = {
    "kseq": "K-SEQ",
    "specinfer": "SpecInfer rule",
    "nss": "NSS rule",
    "lp": "general LP",
    "maxflow": "max-flow",
    "maxflow_opt": "optimized max-flow",
    "global_resolution": "global resolution",
}

ALGORITHMS: dict[str, AlgorithmSpec] = {
    spec.name: spec
    for spec in (
        AlgorithmSpec(
            "token",
            "Token verification",
            "BV paper, Alg. 1",
            token_verify,
            token_verify_reference,
            SINGLE_PATH_DRAFTERS,
            False,
            longest_prefix=True,
        ),
        AlgorithmSpec(
            "block",
            "Block verification",
            "BV paper, Alg. 2, eq. 3-5",
            block_verify,
            block_verify_reference,
            SINGLE_PATH_DRAFTERS,
            False,
        ),
        AlgorithmSpec(
            "greedy_block",
            "Greedy block verification",
            "BV paper, App. C, Alg. 4-6",
            greedy_block_verify,
            greedy_block_verify_reference,
            SAMPLED_PATH_DRAFTERS,
            False,
            carry=True,
        ),
        AlgorithmSpec(
            "gbv", "GBV", "GBV paper, Alg. 1, eq. 19-23", gbv_verify, gbv_verify_reference, PATH_DRAFTERS, True
        ),
        AlgorithmSpec(
            "spectr",
            "SpecTr",
            "SpecTr K-SEQ per node (GBV paper, App. L); OT rules: Global Resolution paper, App. R",
            spectr_verify,
            multidraft_walk_reference(NODE_RULES["kseq"]),
            PATH_DRAFTERS,
            True,
            node_rules=SPECTR_NODE_RULES,
        ),
        AlgorithmSpec(
            "specinfer",
            "SpecInfer",
            "SpecInfer multi-step speculative sampling (GBV paper, App. L)",
            specinfer_verify,
            multidraft_walk_reference(NODE_RULES["specinfer"]),
            PATH_DRAFTERS,
            True,
        ),
        AlgorithmSpec(
            "nss",
            "NSS",
            "naive speculative sampling (GBV paper, App. L)",
            nss_verify,
            multidraft_walk_reference(NODE_RULES["nss"]),
            PATH_DRAFTERS,
            True,
        ),
        AlgorithmSpec(
            "traversal",
            "Traversal",
            "traversal verification (GBV paper, App. L)",
            traversal_verify,
            traversal_verify_reference,
            PATH_DRAFTERS,
            True,
        ),
        AlgorithmSpec(
            "spectr_gbv",
            "SpecTr-GBV",
            "SpecTr-GBV paper, Alg. 1-3, eq. 2-4",
            spectr_gbv_verify,
            spectr_gbv_verify_reference,
            SAMPLED_PATH_DRAFTERS,
            True,
            carry=True,
            lossless_paths=1,  # K >= 2: Lemma A.1's sibling sum (docs/algorithms.md)
        ),
        AlgorithmSpec(
            "ddtree",
            "DDTree",
            "DDTree paper, Alg. 1 (tree), Sec. 4.4 (walk)",
            ddtree_walk,
            ddtree_walk_reference,
            MARGINAL_DRAFTERS,
            False,
            tree_builder=True,
        ),
    )
}
PATH_ALGORITHMS: tuple[str, ...] = tuple(name for name, spec in ALGORITHMS.items() if not spec.tree_builder)
# algorithm.L=auto (`core.adaptive`): the single-path verifiers, certified under a policy that depends on the
# past (tests/verify/test_adaptive_certificates.py), with a drafter that samples the path from the draft alone
ADAPTIVE_ALGORITHMS: tuple[str, ...] = tuple(
    name for name, spec in ALGORITHMS.items() if not spec.tree_builder and not spec.multi_path
)
ADAPTIVE_DRAFTERS: tuple[str, ...] = tuple(name for name in PATH_DRAFTERS if not DRAFTERS[name].target_features)
# algorithm.confidence_stop (`drafting.iid.sample_iid_paths`): the single-path verifiers without a carry, certified
# under a stop that the round's own draft decides (tests/verify/test_adaptive_certificates.py); greedy block's carry
# assumes every round drafts the positions it modifies from a law the stop would change, and the enumeration shows
# it biased
STOP_ALGORITHMS: tuple[str, ...] = tuple(name for name in ADAPTIVE_ALGORITHMS if not ALGORITHMS[name].carry)


def get_algorithm(name: str) -> AlgorithmSpec:
    """The spec registered under an `algorithm=` name; ValueError listing the names otherwise."""
    if name not in ALGORITHMS:
        raise ValueError(f"algorithm.name={name!r}: must be one of {', '.join(ALGORITHMS)}")
    return ALGORITHMS[name]


def method_label(algorithm: str, node_rule: str, drafter: str, tree: str) -> str:
    """The method as the papers name it: the verifier (a multi-path walk with its node rule), or for a
    tree algorithm the drafter's tree (`tree=chain`: the drafter's own chain, DDTree's baseline column)."""
    spec = ALGORITHMS.get(algorithm)
    if spec is None:
        return algorithm
    if spec.tree_builder:
        drafted = DRAFTERS[drafter].label if drafter in DRAFTERS else drafter
        return drafted if tree == CHAIN else f"{drafted}+{spec.label}"
    if spec.node_rules:
        return f"{spec.label} ({NODE_RULE_LABELS.get(node_rule, node_rule)})"
    return spec.label


def method_rank(algorithm: str, node_rule: str) -> tuple[int, int]:
    """Where a method sorts as the papers list them: single-path, multi-path (SpecTr's node rules in the
    Global Resolution paper's order), then tree algorithms; one past the end for what is not registered."""
    walks = [name for name, spec in ALGORITHMS.items() if not spec.tree_builder]
    first = walks.index(algorithm) if algorithm in walks else len(walks)
    rules = list(NODE_RULE_LABELS)
    return first, rules.index(node_rule) if node_rule in rules else len(rules)


def drafter_name_error(name: str) -> str | None:
    """Why ``name`` is not a registered drafter (None: it is)."""
    if name in DRAFTERS:
        return None
    return f"drafter.name={name!r}: must be one of {', '.join(DRAFTERS)}"


def node_rule_error(spec: AlgorithmSpec, node_rule: str) -> str | None:
    """Why ``node_rule`` does not fit ``spec`` (None: it does). `kseq` stands for "the algorithm's own"."""
    if not spec.node_rules:
        if node_rule == "kseq":
            return None
        takers = "/".join(name for name, s in ALGORITHMS.items() if s.node_rules)
        return f"algorithm.node_rule={node_rule!r}: only algorithm={takers} takes a node rule (others: kseq)"
    if node_rule not in spec.node_rules:
        return f"algorithm.node_rule={node_rule!r}: must be one of {', '.join(spec.node_rules)}"
    return None


def _scalar_node_rule(node_rule: str) -> Any:
    """The scalar `NodeRule` of a spectr node rule (the OT ones import SciPy and networkx: only when asked for)."""
    if node_rule in NODE_RULES:
        return NODE_RULES[node_rule]
    from speculab.verify.ot import OT_NODE_RULES

    return OT_NODE_RULES[node_rule]


def _unchecked_verifier(spec: AlgorithmSpec, node_rule: str) -> PathVerifier | TreeVerifier:
    if not spec.node_rules or node_rule == spec.node_rules[0]:
        return spec.verifier
    if node_rule in _BATCHED_NODE_RULES:
        return _BATCHED_NODE_RULES[node_rule]
    return partial(rowwise_walk_verify, rule=_scalar_node_rule(node_rule))


def get_verifier(
    name: str, node_rule: str = "kseq", replay: Callable[[DrawnPathVerifier], PathVerifier] | None = None
) -> Any:
    """The batched verifier of ``name`` (with ``node_rule`` for spectr), behind the contract's shape check.

    A `PathVerifier` ``(paths, p, q, *, rng, carry)`` or, for tree algorithms, a `TreeVerifier`
    ``(tree, p, *, rng)``. ``replay``: how a `DrawnPathVerifier` runs (`verify.captured.CapturedPaths`: from
    CUDA graphs); None, and every other verifier, as it is. ValueError naming the field and its choices
    for an unknown name or rule.
    """
    spec = get_algorithm(name)
    if (error := node_rule_error(spec, node_rule)) is not None:
        raise ValueError(error)
    verify = _unchecked_verifier(spec, node_rule)
    if replay is not None and isinstance(verify, DrawnPathVerifier):
        verify = replay(verify)
    # the registry pairs tree_builder with a TreeVerifier and every other algorithm with a PathVerifier
    return (
        checked_tree_verifier(cast(TreeVerifier, verify))
        if spec.tree_builder
        else checked_path_verifier(cast(PathVerifier, verify))
    )


def get_reference(name: str, node_rule: str = "kseq") -> Reference:
    """The scalar reference of a path algorithm (the oracle of its exact certificate)."""
    spec = get_algorithm(name)
    if (error := node_rule_error(spec, node_rule)) is not None:
        raise ValueError(error)
    if spec.node_rules and node_rule != spec.node_rules[0]:
        return multidraft_walk_reference(_scalar_node_rule(node_rule))
    return spec.reference


def lossless_cell(spec: AlgorithmSpec) -> str:
    """The docs table's "lossless" entry: yes, or the K the certificates cover."""
    if spec.lossless_paths is None:
        return "yes"
    return f"K = {spec.lossless_paths} only (K > {spec.lossless_paths}: `algorithm.allow_lossy=true`)"


def registry_markdown() -> str:
    """The registry as the markdown table of docs/algorithms.md."""
    yes = {True: "yes", False: "no"}
    lines = [
        "| algorithm | paper | drafters | K > 1 | node rules | tree builder | carry | lossless |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for spec in ALGORITHMS.values():
        rules = ", ".join(f"`{r}`" for r in spec.node_rules) or "-"
        drafters = ", ".join(f"`{d}`" for d in spec.drafters)
        lines.append(
            f"| `{spec.name}` | {spec.paper} | {drafters} | {yes[spec.multi_path]} | {rules} | "
            f"{yes[spec.tree_builder]} | {yes[spec.carry]} | {lossless_cell(spec)} |"
        )
    lines += ["", "| drafter | proposes | weights from | what it is |", "|---|---|---|---|"]
    lines += [f"| `{d.name}` | {d.proposes} | `{d.weights}` | {d.summary} |" for d in DRAFTERS.values()]
    return "\n".join(lines)


if __name__ == "__main__":
    print(registry_markdown())
