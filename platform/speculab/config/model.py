"""`model.*`: the target/draft pair a run loads and where each role's checkpoint is (a local path, or
a snapshot in the Hugging Face cache, never downloaded; the draft role's may be the drafter's own,
`drafter.path`, or the pair's for that drafter, `model.drafters`), and the checks of those
checkpoints: the files a run needs (config.json, tokenizer.json, block.json, the safetensors headers,
never tensor data), one vocabulary for both roles and a context long enough for the run. A drafter's
checkpoint against the drafter is `config.drafter_checkpoint`'s.

The registry and `speculab.models` import torch and transformers, and the Hub client takes a while to
import, so the functions that need them import them when they run: the dataclass loads with
`speculab --help`, which needs none of them."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from omegaconf import MISSING
from safetensors import SafetensorError, safe_open

from speculab.config.algorithm import DrafterConfig, DraftView, draft_length
from speculab.config.checkpoints import Checkpoint, irregular_error, read_json, resolve_path, typed_errors
from speculab.config.errors import choice

DTYPES = ("float32", "float16", "bfloat16")
ROLES = ("target", "draft")
# config.json keys holding a model's context length, the first one present wins
CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length")


@dataclass
class ModelConfig:
    name: str = MISSING
    target_path: str | None = None  # local checkpoint dir (relative: from the project root); wins over target_id
    draft_path: str | None = None
    target_id: str | None = None  # Hugging Face hub id, found in the local HF cache (never downloaded)
    draft_id: str | None = None
    # drafter name -> this pair's checkpoint dir for that drafter, where it is not the draft model (DFlash2
    # beside DFlash: a sweep over drafter=... takes each one's own); drafter.path wins
    drafters: dict[str, str] = field(default_factory=dict)
    backend: str = "hf"
    dtype: str = "float32"
    device: str = "cpu"  # cpu, cuda, cuda:N (inline), auto
    # the draft's, where it differs (null: model.device); on Ray with the loop on the target's rank 0,
    # cuda:1 is a GPU of the draft's own in rank 0's bundle (config.cluster.OWN_DRAFT_GPU)
    draft_device: str | None = None
    capture: bool = True  # on CUDA: the models' passes replayed from CUDA graphs (models.static_pass); false: eager
    # the captured passes compiled by inductor first (fused norms, rotary, residuals); off until a GPU run checks it
    compile: bool = False
    # with capture on CUDA: the path verifier's decision replayed from a CUDA graph per shape (`verify.captured`);
    # off until a GPU run checks it
    capture_verifier: bool = False


class ModelView(DraftView, Protocol):
    """The parts of a config the model's checks read (`Config` is one; a shape, not the class,
    because `Config` is built from these dataclasses)."""

    model: ModelConfig


def checkpoint_dir(cfg: ModelConfig, role: str) -> Path:
    """The local directory of the `role` ("target" or "draft") checkpoint, without downloading.

    `model.<role>_path` if set, else the snapshot of `model.<role>_id` in the Hugging Face
    cache (HF_HOME / HF_HUB_CACHE). ValueError naming the keys and how to download when absent.
    """
    from huggingface_hub import constants, try_to_load_from_cache

    path, hub_id = getattr(cfg, f"{role}_path"), getattr(cfg, f"{role}_id")
    if path is not None:
        local = resolve_path(path)
        if not (local / "config.json").is_file():
            raise ValueError(
                f"model.{role}_path={str(local)!r}: no checkpoint there (expected a directory with config.json)"
            )
        return local
    if hub_id is None:
        raise ValueError(f"model.{role}_path and model.{role}_id are both null: set a local checkpoint dir or a hub id")
    cached = try_to_load_from_cache(hub_id, "config.json")
    if not isinstance(cached, str):
        raise ValueError(
            f"model.{role}_id={hub_id!r}: not in the Hugging Face cache ({constants.HF_HUB_CACHE}) and "
            f"model.{role}_path is null; download it with `hf download {hub_id}` (gated models need "
            f"`hf auth login` first), or `hf download {hub_id} --local-dir DIR` and set model.{role}_path=DIR"
        )
    return Path(cached).parent


def own_weights(drafter: DrafterConfig) -> bool:
    """The draft role loads `drafter.path` (a drafter with its own checkpoint), not the pair's draft."""
    from speculab.registry import DRAFTERS

    spec = DRAFTERS.get(drafter.name)
    if spec is None or spec.weights == "model.draft":
        return False
    return spec.weights == "drafter.path" or drafter.path is not None


def drafter_dir(cfg: DrafterConfig) -> Path:
    """The checkpoint dir of a drafter with its own weights (`drafter.path`, holding its marker file:
    block.json for `parallel`, config.json for `dflash`)."""
    from speculab.registry import DRAFTERS

    marker = DRAFTERS[cfg.name].marker
    if not (cfg.path and (resolve_path(cfg.path) / marker).is_file()):
        raise ValueError(f"drafter.path={cfg.path!r}: no {cfg.name} drafter there (expected a directory with {marker})")
    return resolve_path(cfg.path)


def locate(cfg: ModelView, role: str) -> tuple[str, Path]:
    """(config key, dir) of the `role` ("target" or "draft") checkpoint a run loads; ValueError
    naming the key when there is none."""
    if role == "draft" and own_weights(cfg.drafter):
        return "drafter.path", drafter_dir(cfg.drafter)
    if role == "draft" and cfg.drafter.name in cfg.model.drafters:
        return _listed_drafter(cfg.model, cfg.drafter.name)
    key = f"model.{role}_path" if getattr(cfg.model, f"{role}_path") is not None else f"model.{role}_id"
    return key, checkpoint_dir(cfg.model, role)


def _listed_drafter(model: ModelConfig, name: str) -> tuple[str, Path]:
    """(key, dir) of the pair's checkpoint for drafter `name` (`model.drafters`)."""
    key, local = f"model.drafters.{name}", resolve_path(model.drafters[name])
    if not (local / "config.json").is_file():
        raise ValueError(f"{key}={str(local)!r}: no checkpoint there (expected a directory with config.json)")
    return key, local


def drafters_errors(model: ModelConfig) -> list[str]:
    """`model.drafters` names registered drafters only."""
    from speculab.registry import DRAFTERS

    return [
        f"model.drafters.{name}: not a drafter; the keys must be among {', '.join(DRAFTERS)}"
        for name in model.drafters
        if name not in DRAFTERS
    ]


def locate_roles(cfg: ModelView) -> tuple[list[str], dict[str, tuple[str, Path]]]:
    """(errors, (config key, dir) per role found): each role's checkpoint looked up once, for the
    draft length, the checks and the run's plan to share."""
    errors: list[str] = []
    located: dict[str, tuple[str, Path]] = {}
    for role in ROLES:
        try:
            located[role] = locate(cfg, role)
        except ValueError as err:
            errors.append(str(err))
    return errors, located


def model_errors(cfg: ModelView, located: dict[str, tuple[str, Path]]) -> tuple[list[str], dict[str, Checkpoint]]:
    """(errors, checkpoint per role read) for the checkpoints `locate_roles` found. The draft role's
    weights are the pair's draft model (`model.draft_*`) or, for a drafter with its own checkpoint,
    `drafter.path`."""
    model = cfg.model
    errors: list[str] = []
    choice(errors, "model.backend", model.backend, pair_backends())
    choice(errors, "model.dtype", model.dtype, DTYPES)
    errors += drafters_errors(model)
    found: dict[str, Checkpoint] = {}
    vocab: dict[str, tuple[int, Any]] = {}
    for role, (key, path) in located.items():
        try:
            found[role] = _checkpoint(key, path)
            vocab[role] = _vocabulary(found[role])
        except ValueError as err:
            errors.append(f"{key}: {err}")
        else:
            errors += _position_errors(found[role])
        weights = _weight_errors(key, path)
        if not weights and role in found:  # every file complete: its tensors against its config
            from speculab.models.tensors import weight_problems

            weights = [f"{key}: {line}" for line in weight_problems(path, found[role].config)]
        errors += weights
    if len(vocab) == 2 and _vocabularies_differ(vocab["target"], vocab["draft"]):
        errors.append(
            f"{found['draft'].key}: draft and target vocabularies differ "
            f"(target {vocab['target'][0]} tokens, draft {vocab['draft'][0]}); "
            "speculative decoding needs one shared tokenizer"
        )
    return errors, found


def _checkpoint(key: str, path: Path) -> Checkpoint:
    """The checkpoint at `path` with its config.json, every key the platform reads of the type it must have;
    ValueError naming the file and the keys that are not."""
    config = read_json(path / "config.json")
    if typed := typed_errors(path / "config.json", config):
        raise ValueError("; ".join(typed))
    return Checkpoint(key, path, config)


def pass_errors(model: ModelConfig, target_device: str) -> list[str]:
    """`model.compile` and `model.capture_verifier` act inside the passes replayed from CUDA graphs: each
    needs `model.capture=true` and a CUDA target (the resolved `model.device`), or it would change nothing."""
    errors = []
    for key in ("compile", "capture_verifier"):
        if not getattr(model, key):
            continue
        if not model.capture:
            errors.append(f"model.{key}=true: needs model.capture=true (it acts inside the captured passes)")
        elif not target_device.startswith("cuda"):
            errors.append(
                f"model.{key}=true: needs a CUDA model.device (passes are captured on a GPU only; the target runs "
                f"on {target_device})"
            )
    return errors


def pair_backends() -> tuple[str, ...]:
    """The loaders that `model.backend` may name (`models.roles.PAIR_BACKENDS`): those of a pair's
    checkpoints (a drafter's own come with `drafter=`, a toy's table only in tests)."""
    from speculab.models.roles import PAIR_BACKENDS

    return tuple(PAIR_BACKENDS)


def _weight_errors(key: str, path: Path) -> list[str]:
    """One line per `*.safetensors` file of `path` whose header does not parse or whose data is cut
    short (safe_open checks that the header's offsets cover the file); reads headers, no tensor data."""
    files = sorted(path.glob("*.safetensors"))
    if not files and not any(path.glob("*.bin")):
        return [
            f"{key}: {path} holds a config.json but no weights (*.safetensors or *.bin); "
            "the download or save stopped before them"
        ]
    errors = _index_errors(key, path)
    for weights in files:
        if (irregular := irregular_error(weights)) is not None:
            errors.append(f"{key}: {irregular}")
            continue
        try:
            with safe_open(str(weights), framework="numpy"):
                pass
        except (SafetensorError, OSError) as err:
            errors.append(f"{key}: {weights} is not a complete safetensors file ({err}); download or save it again")
    return errors


def _index_errors(key: str, path: Path) -> list[str]:
    """Every shard file a sharded checkpoint's index (`*.index.json`, its `weight_map`) names exists."""
    errors = []
    for index in sorted(path.glob("*.index.json")):
        try:
            weight_map = read_json(index).get("weight_map")
        except ValueError as err:
            errors.append(f"{key}: {err}; download or save it again")
            continue
        if not isinstance(weight_map, dict):
            errors.append(f"{key}: {index} has no weight_map (tensor name -> shard file); download or save it again")
            continue
        if missing := sorted({str(f) for f in weight_map.values()} - {p.name for p in path.iterdir()}):
            errors.append(
                f"{key}: {index} names {len(missing)} shard file(s) missing from {path}: "
                f"{', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''}; the download stopped before them"
            )
    return errors


def _vocabularies_differ(target: tuple[int, Any], draft: tuple[int, Any]) -> bool:
    """Sizes differ, or both dirs hold a tokenizer.json and their vocabularies differ (a DFlash
    checkpoint ships none: it reads the target's tokens)."""
    return target[0] != draft[0] or (target[1] is not None and draft[1] is not None and target[1] != draft[1])


def _position_errors(checkpoint: Checkpoint) -> list[str]:
    """A model whose attention adds ALiBi biases (Falcon with `alibi`, BLOOM, MPT with `attn_config.alibi`)
    builds them from a 2-D padding mask inside its forward; a tree pass gives each token its place
    through a 4-D mask, so neither the lean layers nor transformers' modules can score a tree for it."""
    config = checkpoint.config
    attention = config.get("attn_config")
    kind = config.get("model_type")
    if config.get("alibi") is True or kind == "bloom" or (isinstance(attention, dict) and attention.get("alibi")):
        return [
            f"{checkpoint.key}: {checkpoint.path} is a {kind} model with ALiBi position biases, which cannot score "
            "a draft tree (they are built from a 2-D padding mask); use a model with rotary or learned positions "
            "(Falcon with alibi=false, Llama, Qwen, Mistral, GPT-2, OPT, ...)"
        ]
    return []


def _vocabulary(checkpoint: Checkpoint) -> tuple[int, Any]:
    """(vocab_size from config.json, tokenizer.json's vocabulary if present): reads no weights;
    ValueError when config.json names no vocabulary size (not a language model's config)."""
    size = checkpoint.config.get("vocab_size")
    if not isinstance(size, int) or isinstance(size, bool) or size < 1:
        raise ValueError(
            f"{checkpoint.path / 'config.json'}: vocab_size={size!r}: not a language model's config "
            "(a positive vocab_size is required)"
        )
    tokenizer = checkpoint.path / "tokenizer.json"
    return size, (_tokenizer_vocabulary(tokenizer) if tokenizer.exists() else None)


def _tokenizer_vocabulary(tokenizer: Path) -> dict[str, Any] | list[Any]:
    """tokenizer.json's vocabulary (`model.vocab`: a token -> id object, or a Unigram's list); ValueError
    naming the file where it has none."""
    model = read_json(tokenizer).get("model")
    vocab = model.get("vocab") if isinstance(model, dict) else None
    if not isinstance(vocab, dict | list):
        raise ValueError(
            f"{tokenizer}: model={model!r:.60}: not a tokenizer's (an object whose vocab lists the tokens is required)"
        )
    return vocab


def context_length(config: dict[str, Any]) -> tuple[str, int] | None:
    """(key, value) of a model's context length in its config.json: the first of CONTEXT_KEYS it holds."""
    key = next((k for k in CONTEXT_KEYS if isinstance(config.get(k), int)), None)
    return None if key is None else (key, config[key])


def prompt_length_errors(cfg: ModelView, target_dir: Path, lengths: list[tuple[str, int]]) -> list[str]:
    """Each prompt ((id, tokens), every one: ids are no key here) plus sampling.max_new_tokens +
    algorithm.L + 1 positions must fit the target's context (checked once the prompts are tokenised,
    before any model loads): a prompt that does not would fail deep in a forward pass, or fill the
    machine's memory first."""
    if (limit := context_length(read_json(target_dir / "config.json"))) is None:
        return []
    (key, context), s, L = limit, cfg.sampling, draft_length(cfg.algorithm)  # set by `resolve`
    room = context - s.max_new_tokens - L - 1
    long = [(pid, n) for pid, n in lengths if n > room]
    return [
        f"dataset: prompt {pid!r} has {n} tokens; with sampling.max_new_tokens={s.max_new_tokens} and "
        f"algorithm.L={L} a prompt may have at most {room} (the target's context is {context}, {key}); "
        "shorten or drop it, or lower sampling.max_new_tokens"
        for pid, n in long
    ]


def context_errors(cfg: ModelView, target: Checkpoint | None) -> list[str]:
    """sampling.max_new_tokens + algorithm.L + 1 positions must fit the target's context length
    (the first of CONTEXT_KEYS in its config.json; no check when it has none)."""
    if target is None or (limit := context_length(target.config)) is None:
        return []
    (key, context), s, L = limit, cfg.sampling, draft_length(cfg.algorithm)  # set by `with_draft_length`
    if (needed := s.max_new_tokens + L + 1) <= context:
        return []
    return [
        f"sampling.max_new_tokens={s.max_new_tokens} + algorithm.L={L} + 1 = {needed} positions: more than the "
        f"target's context of {context} ({key} in {target.path / 'config.json'}); "
        f"lower them so that sampling.max_new_tokens + algorithm.L <= {context - 1}"
    ]
