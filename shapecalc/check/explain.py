"""`explain`: the first seed's §6–§7 (single-head attention by hand, and the causal mask)
example, run through the NumPy executor.

X = [[1,0],[0,1],[1,1]], WQ = I, WK = [[1,0],[1,1]], WV = [[1,1],[0,1]] go through the same
operations (`NumericOps.linear`, `matmul`, `scale`, `mask`, `softmax`) that run real models, and
every matrix is printed with its shape and the rule that makes each product legal:
[m,n] × [n,p] = [m,p]. With a user's own toy model, head 0 of layer 0 is walked the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..interpret.caches import ContiguousKV
from ..interpret.numeric import NumericOps
from ..interpret.weights import Weights
from ..model.config import ModelConfig, ShapecalcError, Workload
from ..model.expr import Dim

SEED_X = [[1, 0], [0, 1], [1, 1]]
SEED_WQ = [[1, 0], [0, 1]]
SEED_WK = [[1, 0], [1, 1]]
SEED_WV = [[1, 1], [0, 1]]
MAX_D, MAX_T = 64, 16  # every matrix is printed


@dataclass
class Matrix:
    key: str
    title: str
    value: np.ndarray  # 2-D
    rule: str


@dataclass
class Walk:
    heading: str
    steps: list[Matrix]


def _shape(a: np.ndarray) -> str:
    return "[" + ",".join(str(n) for n in a.shape) + "]"


def _product(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> str:
    (m, n), (n2, p) = a.shape, b.shape
    assert n == n2 and out.shape == (m, p)
    return f"[{m},{n}] × [{n2},{p}] = [{m},{p}]  (inner dims {n} = {n2})"


def _walk(model: ModelConfig, T: int, X: np.ndarray, weights: Weights, heading: str) -> Walk:
    wl = Workload(batch=1, seq=T, dtype="fp32")
    ops = NumericOps(model, wl, weights, 1, np.zeros((1, T), dtype=np.int64),
                     ContiguousKV("fp32", [None], np.float64))
    ops.group("block")
    ops._layer = 0
    dh = model.dh
    x = X[None, None]  # [rank, B, T, D]
    proj = {n: ops.linear(x, f"attn.{n}", f"{n} projection", None, None, model.qkv_bias,
                          "replicated") for n in "qkv"}
    q, k, v = (ops.split_heads(proj[n], f"attn.{n}.heads", n, None, None)
               for n in "qkv")  # [1, 1, heads, T, Dh]
    steps = [Matrix("X", "X: the input, one row per token", X, _shape(X))]
    Ws = {n.upper(): weights.linear(0, f"attn.{n}", 1)[4][0][:, :dh]
          for n in "qkv"}  # head 0's columns
    for n, W in Ws.items():
        steps.append(Matrix(f"W{n}", f"W{n}: parameters", W, _shape(W)))
    for n, W in Ws.items():
        a = {"Q": q, "K": k, "V": v}[n][0, 0, 0]
        steps.append(Matrix(n, f"{n} = X × W{n}", a, _product(X, W, a)))
    if model.positions == "rope":
        angles = ops.rope_angles(None, None, model.rope_base)
        q = ops.rope(q, "attn.rope", "RoPE q", angles)
        k = ops.rope(k, "attn.rope", "RoPE k", angles)
        steps += [Matrix("Q_rope", "Q after RoPE (each pair rotated by its position)",
                         q[0, 0, 0], _shape(q[0, 0, 0])),
                  Matrix("K_rope", "K after RoPE", k[0, 0, 0], _shape(k[0, 0, 0]))]
    if q.shape[2] != k.shape[2]:  # GQA/MQA: KV head 0 serves query head 0
        k = ops.repeat_kv(k, "attn.repeat_kv", "repeat k", 0, None)
        v = ops.repeat_kv(v, "attn.repeat_kv", "repeat v", 0, None)
    kt = ops.transpose_last(k, "attn.kT", "kᵀ")
    scores = ops.matmul(q, kt, "attn.scores", "QKᵀ", causal=False, window=None)
    scaled = ops.scale(scores.copy(), "attn.scale", "scale", dh**-0.5, "1/√Dh")
    A = ops.softmax(scaled.copy(), "attn.softmax", "softmax")
    O = ops.matmul(A, v, "attn.values", "A·V", causal=False, window=None)
    masked = ops.mask(scaled.copy(), "attn.mask", "causal mask", "causal")
    shown = np.where(ops.causal, scaled[0, 0, 0], -np.inf)
    Ac = ops.softmax(masked, "attn.softmax", "softmax")
    Oc = ops.matmul(Ac, v, "attn.values", "A·V", causal=False, window=None)
    h = (0, 0, 0)
    q0, kt0, v0 = q[h], kt[h], v[h]
    root = f"√{dh} ≈ {dh**0.5:.3f}"
    steps += [
        Matrix("K_T", "Kᵀ: K transposed", kt0, f"{_shape(k[h])} → {_shape(kt0)}"),
        Matrix("scores", "QKᵀ: row i, column j = q_i · k_j", scores[h],
               _product(q0, kt0, scores[h])),
        Matrix("scaled", f"S = QKᵀ / √Dh, {root}", scaled[h], _shape(scaled[h])),
        Matrix("weights", "A = softmax(S), row by row (row max subtracted first)", A[h],
               f"{_shape(A[h])}, each row sums to 1"),
        Matrix("output", "O = A × V: each token mixes the values it attends to", O[h],
               _product(A[h], v0, O[h])),
        Matrix("causal_scores", "S + M: M = −∞ above the diagonal (no reading the future)",
               shown, _shape(shown)),
        Matrix("causal_weights", "A_causal = softmax(S + M)", Ac[h], _shape(Ac[h])),
        Matrix("causal_output", "O_causal = A_causal × V", Oc[h], _product(Ac[h], v0, Oc[h])),
    ]
    return Walk(heading, steps)


def seed_example() -> Walk:
    model = ModelConfig(name="seed §6–§7", vocab_size=3, d_model=2, n_layers=1, n_heads=1,
                        d_ff=2, positions="none")
    given = {(0, "attn.q"): np.array(SEED_WQ), (0, "attn.k"): np.array(SEED_WK),
             (0, "attn.v"): np.array(SEED_WV)}
    weights = Weights(model, dtype=np.float64, given=given)
    return _walk(model, 3, np.array(SEED_X, dtype=np.float64), weights,
                 "The worked attention example (single-head attention by hand): T=3 tokens, "
                 "D=Dh=2, one head")


TOPK_X = [[1, 0], [0, 1], [1, 1], [2, 0], [0, 2], [1, -1]]  # 6 tokens, D = 2
TOPK_K = 2  # K_sel


def topk_example() -> Walk:
    """DeepSeek Sparse Attention's selection by hand: 6 tokens, one indexer head (q_I = X, k_I =
    X·WK, head weight 1), K_sel = 2. The indexer's ReLU scores, causally masked, pick each query's
    top 2 keys (`NumericOps.topk`); the attention's scores keep those only (`select_mask`, the
    eager convention; a sparse kernel reads just those 2 keys: the same output)."""
    model = ModelConfig(name="top-k by hand", vocab_size=6, d_model=2, n_layers=1, n_heads=1,
                        d_ff=2, positions="none")
    T = len(TOPK_X)
    ops = NumericOps(model, Workload(batch=1, seq=T, dtype="fp32"), Weights(model),
                     1, np.zeros((1, T), dtype=np.int64), ContiguousKV("fp32", [None], np.float64))
    ops.group("block")
    X = np.array(TOPK_X, dtype=np.float64)
    WK, WV = np.array(SEED_WK, dtype=np.float64), np.array(SEED_WV, dtype=np.float64)
    h = (0, 0, 0)
    q, k, v = X[None, None, None], (X @ WK)[None, None, None], (X @ WV)[None, None, None]
    kt = ops.transpose_last(k, "attn.index_kT", "k_Iᵀ")
    raw = ops.matmul(q, kt, "attn.index_scores", "q_I·k_Iᵀ", causal=False, window=None)
    relu = ops.activation(raw.copy(), "attn.index_relu", "indexer", "relu")
    index = ops.head_sum(relu, np.ones((1, 1, T, 1)), "attn.index_sum", "Σ_h w·relu(·)")
    masked = ops.mask(index.copy(), "attn.index_mask", "causal mask", "causal")
    sel = ops.topk(masked, "attn.topk", "top-K_sel", Dim.const(TOPK_K))
    chosen = np.zeros((T, T))
    np.put_along_axis(chosen, sel[0][0, 0], 1.0, axis=-1)
    chosen *= ops.causal  # a query shorter than K_sel also picks masked keys: never read
    S = ops.scale(ops.matmul(q, kt, "attn.scores", "QKᵀ", causal=False, window=None),
                  "attn.scale", "scale", 2**-0.5, "1/√Dh")
    S = ops.mask(S, "attn.mask", "causal mask", "causal")
    S = ops.select_mask(S, sel, "attn.mask", "index mask")
    shown = np.where(chosen > 0, S[h], -np.inf)
    A = ops.softmax(S, "attn.softmax", "softmax")
    O = ops.matmul(A, v, "attn.values", "A·V", causal=False, window=None)
    return Walk(f"DeepSeek Sparse Attention's top-k by hand: T={T} keys, K_sel={TOPK_K}, one "
                "indexer head (q_I = X, k_I = X·WK, weight 1), one attention head "
                "(Q = X, K = X·WK, V = X·WV)", [
        Matrix("X", "X: the input, one row per token", X, _shape(X)),
        Matrix("index_scores", "relu(q_I·k_Iᵀ): row i, column j = the indexer's score of key j "
               "for query i", relu[h], _product(q[h], kt[h], raw[h])),
        Matrix("index_causal", "I + M: M = −∞ above the diagonal",
               np.where(ops.causal, index[h], -np.inf), _shape(index[h])),
        Matrix("selected", f"each row's top {TOPK_K} (1: selected; ties: the lower key; row 0 "
               "has fewer keys than K_sel: all of its own)", chosen, f"{T} rows × {TOPK_K} picks"),
        Matrix("selected_scores", "S = QKᵀ/√2 at the selected keys, −∞ elsewhere", shown,
               _shape(shown)),
        Matrix("weights", "A = softmax(S): each query over its 2 keys only", A[h],
               f"{_shape(A[h])}, each row sums to 1"),
        Matrix("output", "O = A × V", O[h], _product(A[h], v[h], O[h])),
    ])


def toy_presets(extra: list[Path] | None = None) -> list[str]:
    """The presets explain can print whole: D ≤ MAX_D, q, k, v from projections (not MLA)."""
    from ..inputs import sources

    out = []
    for name in sorted(sources.list_presets(extra)):
        try:
            m = sources.load_preset(name, extra)
        except ShapecalcError:
            continue  # a broken preset of the user's is not a suggestion
        if m.d_model <= MAX_D and not m.mla:
            out.append(f"{name} (D={m.d_model})")
    return out


def _shrunk(model: ModelConfig) -> str:
    """`, or this model narrowed: --set d_model=60 --set head_dim=5`: the widest D ≤ MAX_D
    that keeps its H heads (and an even Dh under RoPE), if the narrowed model validates."""
    h = model.n_heads
    dh = MAX_D // h - (MAX_D // h) % (2 if model.positions == "rope" else 1)
    if dh < 1:
        return ""
    sets = {"d_model": h * dh, "head_dim": dh}
    try:
        ModelConfig.model_validate({**model.model_dump(), **sets})
    except (ShapecalcError, ValueError):
        return ""
    return ", or this model narrowed to D ≤ 64: " + " ".join(
        f"--set {k}={v}" for k, v in sets.items())


def own_model(model: ModelConfig, T: int, seed: int = 0,
              presets_dir: list[Path] | None = None) -> Walk:
    if model.d_model > MAX_D:
        toys = toy_presets(presets_dir)
        raise ShapecalcError(
            "model", f"explain prints every matrix; D={model.d_model} is more than {MAX_D}: "
            + (f"try a toy model, a preset (--preset NAME): {', '.join(toys)}" if toys else
               "give a toy model (--config with d_model ≤ 64)")
            + _shrunk(model))
    if not 1 <= T <= MAX_T:
        raise ShapecalcError("seq", f"explain prints every matrix: T must be 1..{MAX_T}, not {T}")
    if model.mla:  # its q, k, v come through latents: `trace` lists those stages, verify runs them
        raise ShapecalcError("kv_lora_rank", "explain walks q, k, v projections; Multi-head Latent "
                             "Attention builds them from latents: see its stages in `trace`")
    # unit-scale weights, so that scores are not all ≈ 0 as with 0.02-scale ones
    weights = Weights(model, seed, np.float64, std=model.d_model**-0.5)
    X = np.random.default_rng(seed + 1).standard_normal((T, model.d_model))
    return _walk(model, T, X, weights,
                 f"{model.name}: head 0 of {model.n_heads} in layer 0, T={T}, D={model.d_model}, "
                 f"Dh={model.dh}, seeded input X (seed {seed})")


def to_json(walk: Walk) -> dict[str, Any]:
    out: dict[str, Any] = {"example": walk.heading}
    for s in walk.steps:
        out[s.key] = [[None if np.isinf(x) else float(x) for x in row] for row in s.value]
    out["shapes"] = {s.key: list(s.value.shape) for s in walk.steps}
    out["rules"] = {s.key: s.rule for s in walk.steps}
    return out
