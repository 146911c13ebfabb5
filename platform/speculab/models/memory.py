"""Memory planner: bytes per GPU of a target/draft pair on a cluster, from config.json alone.

Parameters are counted from the architecture numbers in config.json (Llama-style decoders:
llama, mistral, qwen2, qwen3, qwen3_moe and the Llama-shaped DeepSeek-Coder; and OPT), so a
footprint needs no weights and no download beyond config.json. Per GPU it adds:

- weights / tp_size: DeepSpeed AutoTP shards every linear layer and the embedding (0.19's
  `_slice_embedding`); the replicated norms are < 0.01% and ignored;
- the KV cache for batch x (prompt + max new tokens + largest tree), K and V in every layer,
  split over the TP ranks by KV head, with the slack of `TreeLM`'s lazy repacking;
- activations of the largest forward pass (the prefill, or the largest tree pass);
- the draft (weights, KV, activations) on its own GPU or beside one target shard.

It is an estimate for refusing configs that cannot fit, not an allocator: fragmentation and
the CUDA context are covered by a fixed reserve per GPU. It does not read weights, start
anything, or decide placement (the runtime does).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

GIB = 2**30
RESERVE_BYTES = 1 * GIB  # per GPU: CUDA context, NCCL buffers, allocator slack
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
# TreeLM repacks its cache only when fewer than 3/4 of the slots hold valid tokens.
KV_SLACK = 4 / 3
# Where a draft lives on the GPUs (`cluster.draft_placement` resolved), as the plan and its refusals say it
DRAFT_WHERE = {
    "own": "on its own GPU",
    "beside": "beside a target shard",
    "sharded": "sharded with the target (one shard a GPU)",
}
LLAMA_LIKE = ("llama", "mistral", "qwen2", "qwen3", "qwen3_moe")


@dataclass(frozen=True)
class Architecture:
    """The numbers of a config.json that a memory footprint needs."""

    model_type: str
    params: int
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int  # MLP width a token passes through (top-k experts together for MoE)
    vocab: int
    experts: int = 0  # a mixture-of-experts MLP's experts per layer (0: a dense MLP)

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        """K and V of one token in every layer, summed over all TP ranks."""
        return 2 * self.layers * self.kv_heads * self.head_dim * dtype_bytes


@dataclass(frozen=True)
class Workload:
    """What one decoding pass holds: batch x (prompt + new tokens + tree)."""

    batch: int
    prompt_tokens: int
    max_new_tokens: int
    tree_nodes: int  # largest scored tree, root included (K*L + 1 for K i.i.d. paths of L)
    dtype_bytes: int
    # the most nodes the draft's forest holds beyond the context, where more than the tree's (drafting
    # ahead: `drafting.ahead.speculation_nodes`); 0: the tree's non-root nodes
    draft_nodes: int = 0


@dataclass(frozen=True)
class GpuShare:
    """Bytes one model (or one TP shard of it) holds on one GPU."""

    weights: int
    kv_cache: int
    activations: int

    @property
    def total(self) -> int:
        return self.weights + self.kv_cache + self.activations


@dataclass(frozen=True)
class MemoryFootprint:
    """Per-GPU bytes of a target split over tp_size GPUs and its draft."""

    tp_size: int
    target_shard: GpuShare
    draft: GpuShare  # one GPU's draft: the whole draft (own, beside) or one of its tp_size shards (sharded)
    draft_place: str  # DRAFT_WHERE: own (a GPU of its own), beside (one target shard's GPU), sharded (every one's)

    @property
    def busiest_gpu(self) -> int:
        """Bytes on the fullest GPU, the fixed reserve included."""
        shard = self.target_shard.total + RESERVE_BYTES
        if self.draft_place == "own":
            return max(shard, self.draft.total + RESERVE_BYTES)
        return shard + self.draft.total

    @property
    def gpus(self) -> int:
        return self.tp_size + (1 if self.draft_place == "own" else 0)


def _llama_like_params(c: dict[str, Any], head_dim: int, experts: int) -> int:
    hidden, layers, vocab = c["hidden_size"], c["num_hidden_layers"], c["vocab_size"]
    heads = c["num_attention_heads"]
    kv_heads = c.get("num_key_value_heads") or heads
    q_out, kv_out = heads * head_dim, kv_heads * head_dim
    attention = hidden * (q_out + 2 * kv_out) + q_out * hidden
    if c.get("attention_bias"):
        attention += q_out + 2 * kv_out + hidden
    elif c["model_type"] == "qwen2":  # q, k, v biases always
        attention += q_out + 2 * kv_out
    if c["model_type"] in ("qwen3", "qwen3_moe"):  # per-head q and k RMSNorms
        attention += 2 * head_dim
    if experts:
        mlp = experts * 3 * hidden * c["moe_intermediate_size"] + hidden * experts  # experts + router
    else:
        mlp = 3 * hidden * c["intermediate_size"]  # gate, up, down
    per_layer = attention + mlp + 2 * hidden  # two RMSNorms
    head = 0 if c.get("tie_word_embeddings", False) else vocab * hidden
    return vocab * hidden + layers * per_layer + hidden + head


def _opt_params(c: dict[str, Any]) -> int:
    hidden, ffn, layers = c["hidden_size"], c["ffn_dim"], c["num_hidden_layers"]
    project = c.get("word_embed_proj_dim") or hidden
    embed = c["vocab_size"] * project + (c["max_position_embeddings"] + 2) * hidden  # OPT offsets positions by 2
    projections = 2 * project * hidden if project != hidden else 0
    per_layer = 4 * (hidden * hidden + hidden) + 2 * hidden * ffn + ffn + hidden + 2 * 2 * hidden
    final_norm = 2 * hidden if c.get("do_layer_norm_before", True) and not c.get("_remove_final_layer_norm") else 0
    return embed + projections + layers * per_layer + final_norm  # lm_head tied to the embedding


def architecture(config: dict[str, Any]) -> Architecture:
    """The footprint's numbers from a parsed config.json; ValueError for an unknown model_type."""
    kind = config.get("model_type", "")
    hidden, heads = config["hidden_size"], config["num_attention_heads"]
    if kind == "opt":
        return Architecture(
            kind,
            _opt_params(config),
            hidden,
            config["num_hidden_layers"],
            heads,
            heads,
            hidden // heads,
            config["ffn_dim"],
            config["vocab_size"],
        )
    if kind not in LLAMA_LIKE:
        raise ValueError(f"model_type {kind!r}: the memory planner knows {', '.join(('opt', *LLAMA_LIKE))}")
    head_dim = config.get("head_dim") or hidden // heads
    experts = expert_count(config)
    width = config["moe_intermediate_size"] * config["num_experts_per_tok"] if experts else config["intermediate_size"]
    return Architecture(
        kind,
        _llama_like_params(config, head_dim, experts),
        hidden,
        config["num_hidden_layers"],
        heads,
        config.get("num_key_value_heads") or heads,
        head_dim,
        width,
        config["vocab_size"],
        experts,
    )


def expert_count(config: dict[str, Any]) -> int:
    """A mixture-of-experts config.json's experts per layer (Qwen3-MoE's `num_experts`, Mixtral's
    `num_local_experts`); 0 for a dense model."""
    return int(config.get("num_experts") or config.get("num_local_experts") or 0)


def pass_activations(arch: Architecture, batch: int, queries: int, keys: int, tp_size: int, dtype_bytes: int) -> int:
    """Transient bytes of one forward pass of `queries` tokens over `keys` cached + new tokens.

    An upper estimate: residual stream and norms (4 x [B, n, hidden]), q/k/v of the pass,
    the additive 4-D mask [B, 1, n, keys], one layer's attention scores [B, heads/tp, n, keys]
    and MLP ([B, n, 3 x intermediate/tp]), then logits [B, n, V] in the model dtype and
    probabilities in float32.
    """
    tokens = batch * queries
    qkv = tokens * (arch.heads + 2 * arch.kv_heads) * arch.head_dim // tp_size
    hidden = 4 * tokens * arch.hidden + qkv
    mask = tokens * keys
    scores = tokens * arch.heads // tp_size * keys
    mlp = tokens * 3 * arch.intermediate // tp_size
    logits = tokens * arch.vocab
    return (hidden + mask + scores + mlp + logits) * dtype_bytes + 4 * logits


def model_share(arch: Architecture, work: Workload, tp_size: int, tree_nodes: int) -> GpuShare:
    """One GPU's share of a model split over tp_size ranks (1 = the whole model)."""
    per_sequence = work.prompt_tokens + work.max_new_tokens + tree_nodes
    kv = int(work.batch * per_sequence * arch.kv_bytes_per_token(work.dtype_bytes) * KV_SLACK) // tp_size
    prefill = pass_activations(arch, work.batch, work.prompt_tokens, work.prompt_tokens, tp_size, work.dtype_bytes)
    tree = pass_activations(arch, work.batch, tree_nodes, per_sequence, tp_size, work.dtype_bytes)
    return GpuShare(arch.params * work.dtype_bytes // tp_size, kv, max(prefill, tree))


def memory_footprint(
    target: Architecture, draft: Architecture, work: Workload, tp_size: int, draft_place: str
) -> MemoryFootprint:
    """Per-GPU bytes of the target split over tp_size GPUs, and of the draft where `draft_place` puts
    it (DRAFT_WHERE; sharded: split over the same tp_size GPUs as the target).

    The draft decodes its K paths as a forest in its own cache, so it holds the same
    tokens per sequence as the target (the tree's non-root nodes), or the forest of a round drafted
    ahead (`Workload.draft_nodes`).
    """
    draft_split = tp_size if draft_place == "sharded" else 1
    return MemoryFootprint(
        tp_size,
        model_share(target, work, tp_size, work.tree_nodes),
        model_share(draft, work, draft_split, max(work.tree_nodes - 1, work.draft_nodes)),
        draft_place,
    )


def tp_errors(arch: Architecture, tp_size: int, key: str, backend: str = "transformers") -> list[str]:
    """Both backends split attention by head: tp_size must divide the query and the KV heads. DeepSpeed's
    AutoTP cannot shard a mixture-of-experts MLP (its loader ends in "Cannot copy out of meta tensor"
    inside the actor); transformers' tp_plan shards the experts."""
    errors = []
    if tp_size > 1 and arch.experts and backend == "deepspeed":
        errors.append(
            f"cluster.tp_backend=deepspeed: DeepSpeed AutoTP cannot shard {key}, a mixture of {arch.experts} "
            f"experts a layer, at cluster.tp_size={tp_size}; use cluster.tp_backend=transformers"
        )
    if arch.heads % tp_size == 0 and arch.kv_heads % tp_size == 0:
        return errors
    fits = [n for n in range(1, arch.kv_heads + 1) if arch.heads % n == 0 and arch.kv_heads % n == 0]
    return errors + [
        f"cluster.tp_size={tp_size}: must divide the {arch.heads} attention heads and {arch.kv_heads} KV heads "
        f"of {key}; use one of {', '.join(map(str, fits))}"
    ]


def _gb(n: int) -> str:
    return f"{n / GIB:.1f} GiB"


def gpu_figures(footprint: MemoryFootprint) -> str:
    """Every figure of the footprint's busiest GPU, as the plan prints it and a refusal names it."""
    t, d = footprint.target_shard, footprint.draft
    return (
        f"the busiest GPU needs {_gb(footprint.busiest_gpu)}: target shard (tp_size={footprint.tp_size}) weights "
        f"{_gb(t.weights)} + KV {_gb(t.kv_cache)} + activations {_gb(t.activations)}; draft "
        f"{DRAFT_WHERE[footprint.draft_place]}: weights {_gb(d.weights)} + KV {_gb(d.kv_cache)} + activations "
        f"{_gb(d.activations)}; reserve {_gb(RESERVE_BYTES)} per GPU"
    )


def fit_errors(footprint: MemoryFootprint, gpu_memory_gib: float) -> list[str]:
    """An error naming every number of the footprint when its busiest GPU exceeds one GPU's memory."""
    if footprint.busiest_gpu <= gpu_memory_gib * GIB:
        return []
    shard = (
        ""
        if footprint.draft_place == "sharded"
        else "shard the draft with the target (cluster.draft_placement=sharded), "
    )
    return [
        f"cluster.gpu_memory_gib={gpu_memory_gib}: the model does not fit; {gpu_figures(footprint)}. "
        f"Raise cluster.tp_size, {shard}give the draft its own GPU (model.draft_device=cuda:1, or "
        "cluster.draft_placement=own with cluster.draft_gpu=1), lower "
        "sampling.batch_size / cluster.plan_prompt_tokens / sampling.max_new_tokens, or use a cluster "
        "with more GPU memory"
    ]


def host_figures(footprint: MemoryFootprint) -> tuple[int, str]:
    """(the host bytes of every rank and the draft on the CPU, each figure of them as a refusal names it)."""
    t, d = footprint.target_shard, footprint.draft
    drafts = footprint.tp_size if footprint.draft_place == "sharded" else 1  # a sharded draft: one share a rank
    needed = footprint.tp_size * t.total + drafts * d.total
    return needed, (
        f"{footprint.tp_size} target rank(s) x (weights {_gb(t.weights)} + KV {_gb(t.kv_cache)} + activations "
        f"{_gb(t.activations)}) + {drafts} draft share(s) x (weights {_gb(d.weights)} + KV {_gb(d.kv_cache)} + "
        f"activations {_gb(d.activations)})"
    )


def host_fit_errors(footprint: MemoryFootprint, host_bytes: int) -> list[str]:
    """On the CPU every rank and the draft live in this machine's memory: an error naming the footprint's
    figures when together they exceed `host_bytes` (what this machine, or its cgroup, allows)."""
    needed, figures = host_figures(footprint)
    if needed <= host_bytes:
        return []
    return [
        f"model.device=cpu: the point needs {_gb(needed)} of host memory, more than this machine's "
        f"{_gb(host_bytes)}: {figures}. Lower sampling.batch_size / cluster.plan_prompt_tokens / "
        "sampling.max_new_tokens, pick a smaller model, or run on GPUs"
    ]
