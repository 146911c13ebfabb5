"""The acceptance part of the table of a point's figures (`results.names`): acceptance by draft depth, the
acceptance length per request beside the per-step one, and the figures by prompt category
(docs/measuring.md)."""

from __future__ import annotations

from speculab.results.metric import PER_PROMPT, Metric

PER_REQUEST_FLOOR = 16  # prompts the per-request mean's interval needs (`results.requests`, its simulation)

# Acceptance by depth (docs/measuring.md): one figure per draft depth j = 1..L or accepted length n = 0..L.
ACCEPTANCE_METRICS: tuple[Metric, ...] = (
    Metric(
        "alpha_<j>",
        "accept/alpha_<j>",
        "conditional acceptance at depth j: sequence-rounds with tau >= j over those that drafted depth j with tau >= "
        "j - 1 (the depth-j token accepted, given depths 1..j-1 were; tau before eos / max-new-tokens truncation)",
        **PER_PROMPT,
    ),
    Metric(
        "overlap_<j>",
        "accept/overlap_<j>",
        "mean over the sequence-rounds that reached and drafted depth j (tau >= j - 1) of sum_x min(p_j, q_j) "
        "along the accepted path: what token verification accepts the depth-j token with (alpha_<j> in expectation for "
        "one sampled path; a DDTree's q_j is its depth-j marginal)",
        **PER_PROMPT,
    ),
    Metric(
        "position_<j>",
        "accept/position_<j>",
        "per-position acceptance rate: sequence-rounds that accepted the depth-j draft token over all "
        "sequence-rounds (tau >= j; vLLM's num_accepted_tokens_per_pos / num_drafts, as SPEED-Bench reports "
        "it): unconditional, unlike alpha_<j>; they sum over j to accepted_mean",
        **PER_PROMPT,
    ),
    Metric("hist_<n>", "accept/hist_<n>", "share of sequence-rounds that accepted exactly n draft tokens, n = 0..L"),
    Metric(
        "left_chain",
        "accept/left_chain",
        "deterministic trees (DDTree): share of sequence-rounds whose accepted path left the tree's "
        "first-ranked chain (the drafter's most probable token at every depth)",
    ),
)

REQUEST_METRICS: tuple[Metric, ...] = (
    Metric(
        "acceptance_length_per_request",
        "acceptance_length_per_request",
        "the mean over prompts of each prompt's own acceptance length (1 + its accepted draft tokens over its "
        "rounds): every prompt weighs alike, where acceptance_length weighs each by its rounds (specdec_bench's "
        "mean_accept_length_per_request; vLLM's per-request mean_acceptance_length, averaged)",
        **PER_PROMPT,
        floor=PER_REQUEST_FLOOR,
    ),
)
# A dataset whose prompts carry a category (MT-Bench; a JSONL `category` field): the figures of its prompts alone.
CATEGORY = "category/"
CATEGORY_METRICS: tuple[Metric, ...] = (
    Metric(
        "category/<category>/acceptance_length",
        "category/<category>/acceptance_length",
        "acceptance_length over the rounds of the category's prompts alone",
        **PER_PROMPT,
    ),
    Metric(
        "category/<category>/acceptance_length_per_request",
        "category/<category>/acceptance_length_per_request",
        "acceptance_length_per_request over the category's prompts alone",
        **PER_PROMPT,
        floor=PER_REQUEST_FLOOR,
    ),
    Metric(
        "category/<category>/block_efficiency",
        "category/<category>/block_efficiency",
        "block_efficiency over the category's prompts alone",
        **PER_PROMPT,
    ),
    Metric("category/<category>/prompts", "category/<category>/prompts", "the category's prompts in the run"),
)
