"""Slow references for the DFlash drafters, formula by formula from the published layouts' maths
(one vector at a time, explicit softmax attention): the block's hidden states and logits (DFlash,
and DFlash2's convolutions around each sublayer) and DFlash2's candidate scores."""

from __future__ import annotations

import math

import torch


def rms(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return x / torch.sqrt(x.pow(2).mean() + eps) * weight


def rotate(x: torch.Tensor, position: int, theta: float) -> torch.Tensor:
    """RoPE of one head vector at one position (pairs i and i + D/2)."""
    half = x.shape[0] // 2
    angles = position * theta ** (-torch.arange(half, dtype=torch.float64) / half)
    cos, sin = torch.cos(angles).float(), torch.sin(angles).float()
    return torch.cat([x[:half] * cos - x[half:] * sin, x[half:] * cos + x[:half] * sin])


def convolve(w: dict[str, torch.Tensor], prefix: str, xs: list[torch.Tensor], coefficients, side: int, dflash: dict):
    """DFlash2's block convolution, position by position: out_j = sum over taps t <= j of
    (base[side, t, ch] + coefficients_j[side, t, ch // group]) * x_{j - t}[ch]."""
    taps, group = dflash["conv_kernel_size"], dflash["conv_group_size"]
    base = w[prefix + "base_kernel"]
    out = []
    for j in range(len(xs)):
        total = torch.zeros_like(xs[j])
        for t in range(min(taps, j + 1)):
            correction = coefficients[j][side, t].repeat_interleave(group)
            total = total + (base[side, t] + correction) * xs[j - t]
        out.append(total)
    return out


def conv_coefficients(w: dict[str, torch.Tensor], prefix: str, xs: list[torch.Tensor], dflash: dict):
    """Each position's [2, taps, G] coefficient corrections, one projection of the sublayer's input."""
    taps = dflash["conv_kernel_size"]
    return [(x @ w[prefix + "kernel_projection.weight"].T).view(2, taps, -1) for x in xs]


def around(w, prefix: str, xs: list[torch.Tensor], sublayer, dflash: dict | None) -> list[torch.Tensor]:
    """sublayer over xs, inside DFlash2's convolution where the layout has one."""
    if dflash is None or "conv_kernel_size" not in dflash:
        return sublayer(xs)
    coefficients = conv_coefficients(w, prefix, xs, dflash)
    return convolve(w, prefix, sublayer(convolve(w, prefix, xs, coefficients, 0, dflash)), coefficients, 1, dflash)


def reference_hidden(w: dict[str, torch.Tensor], config: dict, embed, features, tokens, start: int) -> torch.Tensor:
    """The last hidden states [S, hidden] of one block at positions start.. after context features
    [T, n * hidden] at 0..T-1 (a DFlash2 layout's convolutions included)."""
    dflash = config.get("dflash_config")
    eps, theta = config["rms_norm_eps"], config["rope_parameters"]["rope_theta"]
    H, G, D = config["num_attention_heads"], config["num_key_value_heads"], config["head_dim"]
    context = [rms(f @ w["fc.weight"].T, w["hidden_norm.weight"], eps) for f in features]
    h = [embed[t] for t in tokens]
    for i in range(config["num_hidden_layers"]):
        p = f"layers.{i}."

        def proj(name, x):
            return x @ w[p + f"self_attn.{name}_proj.weight"].T

        def attend(x: list[torch.Tensor]) -> list[torch.Tensor]:
            sources = [(c, pos) for pos, c in enumerate(context)] + [(v, start + j) for j, v in enumerate(x)]
            return [attend_one(sources, j, xj) for j, xj in enumerate(x)]

        def attend_one(sources, j: int, xj: torch.Tensor) -> torch.Tensor:
            heads = []
            for a in range(H):
                g = a // (H // G)
                q = rotate(
                    rms(proj("q", xj)[a * D : (a + 1) * D], w[p + "self_attn.q_norm.weight"], eps), start + j, theta
                )
                scores, values = [], []
                for src, pos in sources:
                    k = rms(proj("k", src)[g * D : (g + 1) * D], w[p + "self_attn.k_norm.weight"], eps)
                    scores.append(float(q @ rotate(k, pos, theta)) / math.sqrt(D))
                    values.append(proj("v", src)[g * D : (g + 1) * D])
                probs = torch.softmax(torch.tensor(scores), dim=0)
                heads.append(sum(pr * v for pr, v in zip(probs, values)))
            return torch.cat(heads) @ w[p + "self_attn.o_proj.weight"].T

        def mlp(ys: list[torch.Tensor]) -> list[torch.Tensor]:
            gate = [y @ w[p + "mlp.gate_proj.weight"].T for y in ys]
            up = [y @ w[p + "mlp.up_proj.weight"].T for y in ys]
            return [(torch.nn.functional.silu(g) * u) @ w[p + "mlp.down_proj.weight"].T for g, u in zip(gate, up)]

        x = [rms(v, w[p + "input_layernorm.weight"], eps) for v in h]
        h = [v + o for v, o in zip(h, around(w, p + "attention_conv.", x, attend, dflash))]
        y = [rms(v, w[p + "post_attention_layernorm.weight"], eps) for v in h]
        h = [v + o for v, o in zip(h, around(w, p + "mlp_conv.", y, mlp, dflash))]
    return torch.stack([rms(v, w["norm.weight"], eps) for v in h])


def reference_block(w: dict[str, torch.Tensor], config: dict, embed, head, features, tokens, start: int):
    """logits [S, V] of one block at positions start.. after context features [T, n * hidden] at 0..T-1."""
    return reference_hidden(w, config, embed, features, tokens, start) @ head.T


def reference_selector(w: dict[str, torch.Tensor], config: dict, hidden: torch.Tensor, logits: torch.Tensor, root: int):
    """(candidates [L, K], scores [L, K, K]) of the drafted positions' hidden states [L, hidden] and logits
    [L, V]: the top K by logit (ties to the lower id), and score[d, p, c] = logit[d, c] +
    sum_r A[pred, r] h[d, r] S[c, r], pred the root at d = 0, else candidate p of depth d - 1."""
    k = config["dflash_config"]["selector_top_k"]
    A, S = w["candidate_selector.predecessor_codebook"], w["candidate_selector.successor_codebook"]
    projection = w["candidate_selector.hidden_projection.weight"]
    candidates, scores = [], []
    for d in range(hidden.shape[0]):
        order = sorted(range(logits.shape[1]), key=lambda v: (-float(logits[d, v]), v))[:k]
        h = projection @ hidden[d]
        before = [root] * k if d == 0 else candidates[-1]
        scores.append(
            torch.tensor([[float(logits[d, c]) + float((A[pred] * h * S[c]).sum()) for c in order] for pred in before])
        )
        candidates.append(order)
    return torch.tensor(candidates), torch.stack(scores)
