"""Helpers for training the tiny target/draft pair on Python's standard library.

Corpus, tokenizer, Llama configs, the two training loops (language modelling for the
target, KL distillation for the draft), held-out evaluation, a CPU decode-step timer and
a token-verification simulator on HumanEval prompts. Used by `jobs/train_tiny.py`; it does
not parse arguments or write the README.
"""

from __future__ import annotations

import hashlib
import math
import statistics
import sysconfig
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

EOT = "<|endoftext|>"  # end of a file; also the bos every tokenized text starts with
PAD = "<|pad|>"  # padding only; never appears in training data


# ----------------------------------------------------------------------------- corpus


def stdlib_root() -> Path:
    """Directory of this interpreter's standard library."""
    return Path(sysconfig.get_paths()["stdlib"])


def stdlib_files(root: Path, max_bytes: int) -> list[Path]:
    """Sorted *.py files under `root` (no site-packages), UTF-8 and at most `max_bytes`."""
    files = []
    for path in sorted(root.rglob("*.py"), key=lambda p: p.relative_to(root).as_posix()):
        rel = path.relative_to(root).parts
        if "site-packages" in rel or "dist-packages" in rel or not path.is_file():
            continue
        if path.stat().st_size > max_bytes:
            continue
        try:
            path.read_bytes().decode("utf-8")
        except UnicodeDecodeError:
            continue
        files.append(path)
    return files


def is_heldout(rel_path: str, every: int) -> bool:
    """Deterministic ~1/every hold-out by a hash of the relative path."""
    return int(hashlib.sha1(rel_path.encode()).hexdigest(), 16) % every == 0


def read_texts(paths: list[Path]) -> list[str]:
    """File contents, newlines normalised to '\\n'."""
    return [p.read_text(encoding="utf-8").replace("\r\n", "\n") for p in paths]


# -------------------------------------------------------------------------- tokenizer


def train_tokenizer(texts: list[str], vocab_size: int, max_len: int) -> PreTrainedTokenizerFast:
    """Byte-level BPE (GPT-2 pre-tokenization) with EOT (=bos=eos) and PAD specials.

    Every encoded text starts with EOT, as every training file does.
    """
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=[EOT, PAD],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{EOT} $A", pair=f"{EOT} $A {EOT} $B", special_tokens=[(EOT, tok.token_to_id(EOT))]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=EOT,
        eos_token=EOT,
        pad_token=PAD,
        model_max_length=max_len,
        clean_up_tokenization_spaces=False,  # code: never rewrite " ." or " 's"
    )


def encode_stream(tok: PreTrainedTokenizerFast, texts: list[str]) -> torch.Tensor:
    """All texts as one int32 stream, each preceded by EOT: EOT file EOT file ..."""
    docs = tok.backend_tokenizer.encode_batch(texts, add_special_tokens=True)
    return torch.tensor([t for doc in docs for t in doc.ids], dtype=torch.int32)


# ----------------------------------------------------------------------------- models


@dataclass(frozen=True)
class Shape:
    """Llama size knobs."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int


def llama_config(shape: Shape, tok: PreTrainedTokenizerFast, context: int) -> LlamaConfig:
    """Standard Llama config (RoPE, RMSNorm, SwiGLU, tied embeddings) for `shape`."""
    return LlamaConfig(
        vocab_size=len(tok),
        hidden_size=shape.hidden,
        intermediate_size=shape.intermediate,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.kv_heads,
        max_position_embeddings=context,
        rope_theta=10000.0,
        rms_norm_eps=1e-5,
        tie_word_embeddings=True,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )


def num_params(model: torch.nn.Module) -> int:
    """Unique parameters (tied embeddings counted once)."""
    return sum(p.numel() for p in model.parameters())


def init_draft_from_target(draft: LlamaForCausalLM, target: LlamaForCausalLM) -> list[int]:
    """Copy embeddings, final norm and evenly spaced layers (first..last) of the target
    into a draft of the same width; returns the copied target layer indices."""
    n_t, n_d = target.config.num_hidden_layers, draft.config.num_hidden_layers
    picks = [round(i * (n_t - 1) / max(n_d - 1, 1)) for i in range(n_d)]
    src = target.state_dict()
    state = {}
    for key in draft.state_dict():
        if key.startswith("model.layers."):
            idx, rest = key[len("model.layers.") :].split(".", 1)
            state[key] = src[f"model.layers.{picks[int(idx)]}.{rest}"]
        else:
            state[key] = src[key]
    draft.load_state_dict(state)
    return picks


# --------------------------------------------------------------------------- training


def lr_at(step: int, progress: float, peak: float, warmup: int, floor: float = 0.1) -> float:
    """Linear warmup over `warmup` steps, then cosine decay to `floor * peak` as
    `progress` goes from 0 to 1."""
    if step < warmup:
        return peak * (step + 1) / warmup
    return peak * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0))))


def sample_windows(stream: torch.Tensor, batch: int, length: int, gen: torch.Generator) -> torch.Tensor:
    """`batch` random windows of `length` tokens (int64) from the stream; from a 2-D stream
    [N, length] of fixed windows (e.g. a model's own generations), `batch` random rows."""
    if stream.dim() == 2:
        return stream[torch.randint(0, len(stream), (batch,), generator=gen)].long()
    starts = torch.randint(0, len(stream) - length, (batch,), generator=gen)
    return torch.stack([stream[s : s + length] for s in starts.tolist()]).long()


def make_optimizer(model: torch.nn.Module, lr: float, weight_decay: float) -> torch.optim.AdamW:
    """AdamW; no weight decay on norms."""
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), eps=1e-8)


def kl_target_to_draft(target_logits: torch.Tensor, draft_logits: torch.Tensor) -> torch.Tensor:
    """Mean over positions of KL(p_target || q_draft) at temperature 1 (fp32)."""
    logp = F.log_softmax(target_logits.float(), dim=-1)
    logq = F.log_softmax(draft_logits.float(), dim=-1)
    return (logp.exp() * (logp - logq)).sum(-1).mean()


@dataclass(frozen=True)
class Schedule:
    """Optimisation knobs for one training loop."""

    steps: int
    batch: int
    seq_len: int
    lr: float
    warmup: int
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    bf16: bool = True
    max_seconds: float = 0.0  # > 0: also end (and anneal) by wall time; steps is then a cap


def run_loop(
    model: LlamaForCausalLM,
    loss_fn: Callable[[torch.Tensor], torch.Tensor],
    stream: torch.Tensor,
    sched: Schedule,
    gen: torch.Generator,
    log: Callable[[str], None],
    name: str,
) -> dict[str, float]:
    """Seeded training loop; `loss_fn(window)` returns a scalar loss.

    Progress (which drives the learning-rate decay) is the larger of steps done / steps and
    seconds spent / max_seconds, so a time budget shortens the run but still anneals it.
    Returns the steps taken, seconds and final loss (an EMA).
    """
    model.train()
    opt = make_optimizer(model, sched.lr, sched.weight_decay)
    t0, ema, step, progress = time.perf_counter(), 0.0, 0, 0.0
    while progress < 1.0:
        for group in opt.param_groups:
            group["lr"] = lr_at(step, progress, sched.lr, sched.warmup)
        window = sample_windows(stream, sched.batch, sched.seq_len + 1, gen)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=sched.bf16):
            loss = loss_fn(window)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), sched.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        ema = loss.item() if step == 0 else 0.95 * ema + 0.05 * loss.item()
        step += 1
        elapsed = time.perf_counter() - t0
        progress = max(step / sched.steps, elapsed / sched.max_seconds if sched.max_seconds > 0 else 0.0)
        if step % 25 == 1 or progress >= 1.0:
            log(
                f"[{name}] step {step:5d}/{sched.steps} loss {loss.item():.4f} ema {ema:.4f} "
                f"lr {opt.param_groups[0]['lr']:.2e} {step * sched.batch * sched.seq_len / elapsed:,.0f} tok/s "
                f"{elapsed / 60:.1f} min, progress {progress:.2f}"
            )
    model.eval()
    return {"steps_done": step, "train_s": time.perf_counter() - t0, "final_loss_ema": ema}


def lm_loss(model: LlamaForCausalLM) -> Callable[[torch.Tensor], torch.Tensor]:
    """Next-token cross-entropy on a window (inputs window[:, :-1], labels window[:, 1:])."""

    def fn(window: torch.Tensor) -> torch.Tensor:
        logits = model(window[:, :-1]).logits
        return F.cross_entropy(logits.float().flatten(0, 1), window[:, 1:].flatten())

    return fn


def distill_loss(
    draft: LlamaForCausalLM, target: LlamaForCausalLM, ce_weight: float
) -> Callable[[torch.Tensor], torch.Tensor]:
    """KL(target || draft) on the fly, plus `ce_weight` x next-token cross-entropy."""

    def fn(window: torch.Tensor) -> torch.Tensor:
        inputs = window[:, :-1]
        with torch.no_grad():
            t_logits = target(inputs).logits
        d_logits = draft(inputs).logits
        loss = kl_target_to_draft(t_logits, d_logits)
        if ce_weight > 0:
            loss = loss + ce_weight * F.cross_entropy(d_logits.float().flatten(0, 1), window[:, 1:].flatten())
        return loss

    return fn


# ------------------------------------------------------------------------- evaluation


def eval_windows(stream: torch.Tensor, length: int, limit: int) -> torch.Tensor:
    """Up to `limit` consecutive non-overlapping windows of `length` tokens."""
    n = min(limit, len(stream) // length)
    return stream[: n * length].view(n, length).long()


@torch.inference_mode()
def heldout_metrics(
    target: LlamaForCausalLM, draft: LlamaForCausalLM, windows: torch.Tensor, batch: int = 4
) -> dict[str, float]:
    """Perplexities, mean acceptance alpha = E[sum_x min(p, q)] at T=1, greedy agreement."""
    nll_t = nll_d = alpha = agree = 0.0
    count = 0
    for chunk in windows.split(batch):
        inputs, labels = chunk[:, :-1], chunk[:, 1:]
        lt, ld = target(inputs).logits.float(), draft(inputs).logits.float()
        nll_t += F.cross_entropy(lt.flatten(0, 1), labels.flatten(), reduction="sum").item()
        nll_d += F.cross_entropy(ld.flatten(0, 1), labels.flatten(), reduction="sum").item()
        alpha += torch.minimum(lt.softmax(-1), ld.softmax(-1)).sum(-1).sum().item()
        agree += (lt.argmax(-1) == ld.argmax(-1)).sum().item()
        count += labels.numel()
    return {
        "target_ppl": math.exp(nll_t / count),
        "draft_ppl": math.exp(nll_d / count),
        "alpha_t1": alpha / count,
        "greedy_agreement": agree / count,
        "eval_tokens": count,
    }


class _DecodeStep:
    """One model at batch 1 with a KV cache of fixed length; `__call__` times one step."""

    def __init__(self, model: LlamaForCausalLM, context: torch.Tensor) -> None:
        self.model, self.token = model, context[-1:][None]
        self.cache = model(context[None], use_cache=True).past_key_values

    def __call__(self) -> float:
        t0 = time.perf_counter()
        self.model(self.token, past_key_values=self.cache, use_cache=True)
        elapsed = time.perf_counter() - t0
        self.cache.crop(-1)  # back to the same context length
        return elapsed


@torch.inference_mode()
def decode_ratio(
    target: LlamaForCausalLM,
    draft: LlamaForCausalLM,
    context: torch.Tensor,
    calls: int,
    block: int = 20,
    warmup: int = 20,
) -> dict[str, float]:
    """Median ms of a single-token forward (batch 1, KV cache at len(context)) for each
    model and their ratio. The models take turns in blocks of `block` consecutive calls, so
    that load from other processes hits both alike while each runs with warm caches, as a
    drafter does over its L steps (alternating single calls would evict the draft's weights
    from the CPU caches and overstate its time)."""
    step_t, step_d = _DecodeStep(target, context), _DecodeStep(draft, context)
    for _ in range(warmup):
        step_t(), step_d()
    t_times, d_times = [], []
    for _ in range(max(calls // block, 1)):
        t_times += [step_t() for _ in range(block)]
        d_times += [step_d() for _ in range(block)]
    t, d = statistics.median(t_times) * 1e3, statistics.median(d_times) * 1e3
    return {"target_decode_ms": t, "draft_decode_ms": d, "decode_ratio": t / d}


# --------------------------------------------------- token verification on prompts


def _sample(probs: torch.Tensor, gen: torch.Generator) -> int:
    return int(torch.multinomial(probs, 1, generator=gen))


def _truncate(cache, length: int) -> None:
    """Drop cache entries beyond `length` (transformers 5 `crop` takes minus the count)."""
    extra = cache.get_seq_length() - length
    if extra > 0:
        cache.crop(-extra)


@torch.inference_mode()
def token_sd_efficiency(
    target: LlamaForCausalLM,
    draft: LlamaForCausalLM,
    prompts: list[list[int]],
    draft_len: int,
    new_tokens: int,
    eos_id: int,
    gen: torch.Generator,
) -> float:
    """Block efficiency (tokens per target call) of standard speculative sampling with
    token verification at T=1; a lower bound for block verification at the same L."""
    tokens_total = calls_total = 0
    for prompt in prompts:
        seq = list(prompt)
        t_out = target(torch.tensor([seq[:-1]]), use_cache=True)
        d_out = draft(torch.tensor([seq[:-1]]), use_cache=True)
        t_cache, d_cache = t_out.past_key_values, d_out.past_key_values
        produced = 0
        while produced < new_tokens:
            # draft: feed every committed token it has not seen, then sample L tokens
            d_in = seq[d_cache.get_seq_length() :]
            drafted, qs = [], []
            for _ in range(draft_len):
                q = (
                    draft(torch.tensor([d_in]), past_key_values=d_cache, use_cache=True)
                    .logits[0, -1]
                    .float()
                    .softmax(-1)
                )
                d_in = [_sample(q, gen)]
                drafted.append(d_in[0])
                qs.append(q)
            # target: one call over the last committed token and the drafted ones
            base = t_cache.get_seq_length()
            p_all = (
                target(torch.tensor([[seq[-1]] + drafted]), past_key_values=t_cache, use_cache=True)
                .logits[0]
                .float()
                .softmax(-1)
            )
            calls_total += 1
            accepted = 0
            for i, x in enumerate(drafted):
                if torch.rand((), generator=gen) < torch.clamp(p_all[i, x] / qs[i][x], max=1.0):
                    accepted += 1
                    continue
                residual = torch.clamp(p_all[i] - qs[i], min=0)
                extra = _sample(residual / residual.sum(), gen)
                break
            else:
                extra = _sample(p_all[draft_len], gen)
            new = drafted[:accepted] + [extra]
            seq += new
            produced += len(new)
            tokens_total += len(new)
            _truncate(t_cache, base + 1 + accepted)
            _truncate(d_cache, len(seq) - 1)
            if eos_id in new:
                break
        # overshoot past new_tokens is kept: it still came from these calls
    return tokens_total / max(calls_total, 1)
