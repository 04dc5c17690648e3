"""`verify --train`: the backward of one training step executed in NumPy, and every number of it
checked.

The model runs at reduced width (`narrow`: every width divided by one factor, the vocabulary cut to
a few dozen rows; heads, KV heads, experts, layers kept) in float64, K layers (at least one of each
kind), B sequences of T tokens, prefill with every position's logits. The loss is the mean
cross-entropy of positions 0..T−2 against tokens 1..T−1 (transformers' `labels=ids`), and the
backward runs the vector-Jacobian rules of interpret/vjp.py from it to every parameter. Checks:

  - gradient shapes: every weight gradient has its operand's shape, every parameter read has a
    gradient, every activation gradient has its activation's shape;
  - backward FLOPs: the matmuls the rules ran (2·m·k·n each, dX and dW apart) against
    train/backward.py's symbolic count, stage by stage and in total (K layers standing for N);
    elementwise by the EW_BACKWARD convention;
  - gradients against central finite differences: for every parameter tensor, a seeded random
    entry and the entry of largest gradient; relative error ‖g_fd − g‖₂ / ‖g‖₂ over each tensor's
    entries at most FD_TOL (1e-4), where ‖g‖₂ is above FD_FLOOR (else |g_fd − g| ≤ FD_FLOOR).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..interpret import symbolic
from ..interpret.caches import ContiguousKV
from ..interpret.numeric import windows
from ..interpret.vjp import Backward, TapeOps, TrainOps, backward, cross_entropy
from ..interpret.weights import Weights
from ..model.config import ModelConfig, ShapecalcError, Workload, check
from ..model.forward import Sizes, forward
from ..model.plan import layer_plan
from ..model.stage import Stage
from ..train.backward import EW_BACKWARD, backward_stages, step_flops
from .verify import _check, _exact, _expand, _kind_total, compare_stages

FD_TOL = 1e-4
FD_FLOOR = 1e-9  # below: the finite difference's own rounding (float64, step FD_STEP)
FD_STEP = 1e-5
STD = 0.2  # weights' scale: gradients well above the finite difference's noise
TRAIN_DH = 4  # head width of the reduced model
TRAIN_VOCAB = 64  # rows of the reduced vocabulary (+ the real one's residue mod 8)
# widths an MLA or MoE model also divides
WIDTHS = ("d_ff_expert", "d_ff_shared", "kv_lora_rank", "q_lora_rank", "qk_nope_head_dim",
          "qk_rope_head_dim", "v_head_dim")


def narrow(model: ModelConfig, dh: int = TRAIN_DH) -> ModelConfig:
    """The model with D, Dh, Dff (every MLA and expert width) divided by one factor (Dh/dh, or
    the next smaller one dividing Dh, D and Dff; MLA: D_r/2) and a vocabulary of TRAIN_VOCAB
    rows keeping its residue mod 8 (its padding for p ranks); all else kept."""
    if model.mla:
        f = model.rot // 2
    else:
        f = max(1, model.dh // dh)
        while any(w % f for w in (model.dh, model.d_model, model.d_ff)):
            f -= 1
    update: dict[str, Any] = {"vocab_size": TRAIN_VOCAB + model.vocab_size % 8}
    if f > 1:
        update |= {"d_model": model.d_model // f, "d_ff": model.d_ff // f}
        update |= {w: getattr(model, w) // f for w in WIDTHS if getattr(model, w) is not None}
        if model.head_dim is not None:
            update["head_dim"] = model.dh // f
        if model.rotary_dim is not None:
            update["rotary_dim"] = max(2, model.rotary_dim // f // 2 * 2)
    return model.model_copy(update=update)


def _run(cls: type, model: ModelConfig, wl: Workload, w: Weights, ids: np.ndarray, K: int
         ) -> tuple[Any, np.ndarray]:
    cache = ContiguousKV(wl.kv, windows(model), np.float64)
    ops = cls(model, wl, w, wl.tp, ids, cache, layers=K)
    with np.errstate(over="ignore", under="ignore"):
        forward(ops, model, wl, Sizes.of(model, wl, wl.tp))
    assert ops.full_out is not None
    return ops, ops.full_out


def _loss(model: ModelConfig, wl: Workload, w: Weights, ids: np.ndarray, K: int) -> float:
    w.shards.clear()  # fused or replicated operands are copies: made again from the weights
    _, logits = _run(TrainOps, model, wl, w, ids, K)
    return cross_entropy(logits[0], ids)[0]


def train_verify(model: ModelConfig, wl: Workload, *, layers: int | None = None, seed: int = 0,
                 fd: bool = True) -> dict[str, Any]:
    """Every check of the executed backward (see the module doc) on `model` as given: callers
    narrow it first (the CLI does)."""
    if wl.attention_flops != "full":
        raise ShapecalcError("attention_flops", "verify --train runs eager attention: the "
                             "backward's matmuls are full [T,T] ones; give --attention-flops full")
    if wl.pp > 1 or wl.ep > 1:
        raise ShapecalcError("pp" if wl.pp > 1 else "ep", "verify --train runs one pipeline "
                             "stage and no expert parallelism (pp=1, ep=1)")
    if wl.padding_mask:
        raise ShapecalcError("padding_mask", "verify --train runs unpadded sequences")
    wl = wl.model_copy(update={"phase": "prefill", "logits": "all"})
    check(model, wl)
    plan = layer_plan(model)
    K = plan.covering() if layers is None else layers
    if K < plan.covering():
        raise ShapecalcError("layers", f"K={K} runs only some kinds of layer; run at least "
                             f"{plan.covering()}")
    w = Weights(model, seed, np.float64, p=wl.tp, std=STD)
    ids = np.random.default_rng(seed + 1).integers(0, model.vocab_size, (wl.batch, wl.seq))
    ops, logits = _run(TapeOps, model, wl, w, ids, K)
    loss, dlogits = cross_entropy(logits[0], ids)
    bw = backward(ops, logits, dlogits)

    sym = symbolic.stages(model, wl, wl.tp)
    checks = compare_stages(ops.stages, sym, plan, K, f"forward, p={wl.tp}")[:1]
    checks += _shape_checks(bw, w)
    checks += _flop_checks(ops.stages, sym, bw, model, plan, K)
    fd_doc = None
    if fd:
        c, fd_doc = _fd_check(model, wl, w, ids, K, bw, seed)
        checks.append(c)
    return {
        "model": model.name, "workload": wl.model_dump(), "layers_run": K,
        "precision": "float64", "loss": loss, "checks": checks,
        "finite_differences": fd_doc, "ok": all(c["ok"] for c in checks),
    }


def _shape_checks(bw: Backward, w: Weights) -> list[dict]:
    read = sorted(map(repr, w.full))
    got = sorted(map(repr, bw.grads.g))
    c1 = _check("parameters with a gradient (every parameter read)", len(read),
                len(set(read) & set(got)), read == got)
    if read != got:
        c1["detail"] = f"without: {sorted(set(read) - set(got))[:3]}, extra: " \
                       f"{sorted(set(got) - set(read))[:3]}"
    shapes = [(k, g.shape, w.full[k].shape) for k, g in bw.grads.g.items() if k in w.full]
    wrong = [x for x in shapes if x[1] != x[2]] + [(b, None, None) for b in bw.grads.bad]
    c2 = _check("gradient shapes (parameters)", len(shapes) + len(bw.grads.bad),
                len(shapes) + len(bw.grads.bad) - len(wrong), not wrong)
    if wrong:
        c2["detail"] = str(wrong[0])
    c3 = _check("gradient shapes (activations)", bw.act_shapes, bw.act_shapes_ok,
                bw.act_shapes == bw.act_shapes_ok)
    if bw.act_bad:
        c3["detail"] = bw.act_bad[0]
    return [c1, c2, c3]


def _flop_checks(num: list[Stage], sym: list[Stage], bw: Backward, model: ModelConfig,
                 plan: Any, K: int) -> list[dict]:
    exp = _expand(sym, K, plan)
    sb = backward_stages(exp)
    # each symbolic backward stage's forward stage (backward_stages keeps their order)
    at, i = [], 0
    for b in sb:
        while not (exp[i].name == b.name and exp[i].role == b.role and exp[i].kind == b.kind
                   and exp[i].flops == b.forward_flops
                   and exp[i].elementwise_flops == b.forward_elementwise_flops):
            i += 1
        at.append(i)
        i += 1
    ctx = bw.ctx
    checks = []
    for title, key, got in (("dX", "dx_flops", ctx.dx), ("dW", "dw_flops", ctx.dw)):
        pairs = [(getattr(b, key), got[j]) for b, j in zip(sb, at, strict=True)]
        stray = sum(got) - sum(got[j] for j in at)  # booked to a stage with no backward
        wrong = [(j, s, m) for (s, m), j in zip(pairs, at, strict=True) if s != m]
        c = _check(f"backward {title} FLOPs per stage", sum(s for s, _ in pairs),
                   sum(m for _, m in pairs) + stray, not wrong and not stray)
        if wrong:
            j, s, m = wrong[0]
            c["detail"] = f"{num[j].name!r} (layer {num[j].extra['layer']}): symbolic {s}, " \
                          f"measured {m}"
        checks.append(c)
    ew = [ctx.ew[j] if num[j].op == "embed" else EW_BACKWARD * num[j].elementwise_flops
          for j in at]
    wrong_ew = [(b.elementwise_flops, e) for b, e in zip(sb, ew, strict=True)
                if b.elementwise_flops != e]
    checks.append(_check(f"backward elementwise FLOPs per stage (×{EW_BACKWARD} convention)",
                         sum(b.elementwise_flops for b in sb), sum(ew), not wrong_ew))
    # totals: the K layers run standing for all N
    total = step_flops(sym, model.n_layers)
    for key, got in (("backward_dx_flops", ctx.dx), ("backward_dw_flops", ctx.dw)):
        per_layer = [0] * K
        outside = 0
        for j, s in enumerate(num):
            if s.group == "block":
                per_layer[s.extra["layer"]] += got[j]
            else:
                outside += got[j]
        measured = outside + _kind_total(per_layer, plan)
        checks.append(_check(f"total {key.replace('_', ' ')} (all layers)", total[key],
                             _exact(measured)))
    return checks


def _fd_check(model: ModelConfig, wl: Workload, w: Weights, ids: np.ndarray, K: int,
              bw: Backward, seed: int) -> tuple[dict, dict]:
    rng = np.random.default_rng(seed + 2)
    worst, worst_key, rows, entries = 0.0, "", [], 0
    for key in sorted(w.full, key=repr):
        theta, g = w.full[key], bw.grads.g.get(key)
        if g is None:
            g = np.zeros_like(theta)
        picks = sorted({int(rng.integers(theta.size)), int(np.argmax(np.abs(g)))})
        fd, an = [], []
        for i in picks:
            old = theta.flat[i]
            h = FD_STEP * max(1.0, abs(float(old)))
            theta.flat[i] = old + h
            up = _loss(model, wl, w, ids, K)
            theta.flat[i] = old - h
            down = _loss(model, wl, w, ids, K)
            theta.flat[i] = old
            fd.append((up - down) / (2 * h))
            an.append(float(g.flat[i]))
        w.shards.clear()
        entries += len(picks)
        a, f = np.array(an), np.array(fd)
        norm = float(np.linalg.norm(a))
        err = float(np.linalg.norm(f - a))
        rel = err / norm if norm > FD_FLOOR else (0.0 if err <= FD_FLOOR else float("inf"))
        rows.append({"tensor": repr(key), "entries": picks, "gradient": an,
                     "finite_difference": fd, "relative_error": rel})
        if rel >= worst:
            worst, worst_key = rel, repr(key)
    c = {"name": f"gradients vs central finite differences ({len(rows)} tensors, {entries} "
                 f"entries; ‖g_fd − g‖₂/‖g‖₂ per tensor)",
         "symbolic": 0.0, "measured": worst, "tolerance": FD_TOL, "ok": worst <= FD_TOL}
    if worst > FD_TOL:
        c["detail"] = f"{worst_key}: relative error {worst:.3g}"
    return c, {"tolerance": FD_TOL, "step": FD_STEP, "floor": FD_FLOOR, "norm": "l2 per tensor",
               "tensors": rows}
