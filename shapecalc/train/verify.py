"""`verify --train`: the backward of one training step executed in NumPy, and every number of it
checked.

The model runs at reduced width (`narrow`: every width divided by one factor, the vocabulary cut to
a few dozen rows; heads, KV heads, experts, layers kept) in float64, K layers (at least one of each
kind), B sequences of T tokens, prefill with every position's logits. The loss is the mean
cross-entropy of positions 0..T−2 against tokens 1..T−1 (transformers' `labels=ids`), and the
backward runs the vector-Jacobian rules of interpret/vjp*.py from it to every parameter. (Here, in
train/, not in check/: it checks train/backward.py's count, and check/ sits below train/.) Checks:

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

import ctypes
import glob
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from ..check.budget import WORK_BUDGET_S, GiB, check_layers, default_budget, estimate, work_seconds
from ..check.verify import _check, _close, _exact, _expand, _kind_total, compare_stages
from ..interpret import symbolic
from ..interpret.caches import ContiguousKV
from ..interpret.numeric import windows
from ..interpret.tape_base import Entry, TrainOps
from ..interpret.vjp_tape import Backward, TapeOps, backward, cross_entropy
from ..interpret.weights import Weights
from ..model.config import ModelConfig, ShapecalcError, Workload, check
from ..model.errors import plural
from ..model.forward import Sizes, forward
from ..model.plan import layer_plan
from ..model.stage import Stage
from .backward import (
    EW_BACKWARD,
    SELECTIVE_ROLES,
    backward_stages,
    check_recompute,
    recompute_stages,
    step_flops,
    torch_skipped,
)
from .memory import check_trainable

FD_TOL = 1e-4
FD_FLOOR = 1e-9  # below: the finite difference's own rounding (float64, step FD_STEP)
FD_STEP = 1e-5
STD = 0.2  # weights' scale: gradients well above the finite difference's noise
TRAIN_DH = 4  # head width of the reduced model
TRAIN_VOCAB = 64  # rows of the reduced vocabulary (+ the real one's residue mod 8)
# widths an MLA or MoE model also divides
WIDTHS = ("d_ff_expert", "d_ff_shared", "kv_lora_rank", "q_lora_rank", "qk_nope_head_dim",
          "qk_rope_head_dim", "v_head_dim")
# a token mixer's widths (its heads, groups, kernel and chunk kept), divided down to 2·dh at
# the least: a delta rule's L2 norm of keys 2 or 4 wide is too steep for the finite differences
MIXER_WIDTHS = ("ssm_head_dim", "ssm_state", "gdn_qk_dim", "gdn_v_dim")


@contextmanager
def one_blas_thread() -> Iterator[None]:
    """OpenBLAS on one thread while the tiny matrices run: threads only contend for them (on a
    loaded machine, 10× slower), and one thread sums in one order, so every run prints the same
    bytes. Where numpy's OpenBLAS is not found, nothing changes."""
    lib, n = None, 0
    for path in glob.glob(os.path.join(os.path.dirname(np.__file__), os.pardir, "numpy.libs",
                                       "*openblas*")):
        try:
            lib = ctypes.CDLL(path)
            get, put = lib.scipy_openblas_get_num_threads64_, lib.scipy_openblas_set_num_threads64_
            n = get()
            put(1)
            break
        except (OSError, AttributeError):
            lib = None
    try:
        yield
    finally:
        if lib is not None:
            lib.scipy_openblas_set_num_threads64_(n)


def narrow(model: ModelConfig, dh: int = TRAIN_DH) -> ModelConfig:
    """The model with D, Dh, Dff (every MLA and expert width; a mixer's head widths and state, to
    2·dh at the least) divided by one factor (Dh/dh, or the next smaller one dividing Dh, D and
    Dff; MLA: D_r/2) and a vocabulary of TRAIN_VOCAB rows keeping its residue mod 8 (its padding
    for p ranks); all else kept."""
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
        update |= {w: max(min(getattr(model, w), 2 * dh), getattr(model, w) // f)
                   for w in MIXER_WIDTHS if getattr(model, w) is not None}
        if model.head_dim is not None:
            update["head_dim"] = model.dh // f
        if model.rotary_dim is not None:
            update["rotary_dim"] = max(2, model.rotary_dim // f // 2 * 2)
        if model.rotary_dim_local is not None:  # Laguna's sliding layers' R, alike
            update["rotary_dim_local"] = max(2, model.rotary_dim_local // f // 2 * 2)
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
                 fd: bool = True, recompute: str = "none") -> dict[str, Any]:
    """Every check of the executed backward (see the module doc) on `model` as given: callers
    narrow it first (the CLI does)."""
    check_recompute(recompute)
    check_trainable(model)
    if wl.attention_flops != "full":
        raise ShapecalcError("attention_flops", "verify --train runs eager attention: the "
                             "backward's matmuls are full [T,T] ones; give --attention-flops full")
    if wl.pp > 1 or wl.ep > 1:
        raise ShapecalcError("pp" if wl.pp > 1 else "ep", "verify --train runs one pipeline "
                             "stage and no expert parallelism (pp=1, ep=1)")
    if wl.padding_mask:
        raise ShapecalcError("padding_mask", "verify --train runs unpadded sequences")
    if wl.phase != "prefill":
        raise ShapecalcError("phase", "a training step is a prefill of the whole sequence")
    wl = wl.model_copy(update={"logits": "all"})  # the loss reads every position
    check(model, wl)
    check_layers(model, layers)
    plan = layer_plan(model)
    K = plan.covering() if layers is None else layers
    budget_refusal(model, wl, K)
    with one_blas_thread():
        return _train_verify(model, wl, K, plan, seed, fd, recompute)


def budget_refusal(model: ModelConfig, wl: Workload, K: int) -> None:
    """verify's memory and time budgets, estimated before any array is made (a seq of 10¹² was
    a NumPy allocation traceback): the weights once, and the tape's every stage output of the K
    layers (estimate's `tape`; the forward's estimate counted K times refused hybrids that fit)."""
    need = estimate(model, wl, K, "float64", tape=True)
    if need > default_budget():
        raise ShapecalcError("memory", f"verify --train needs about {need / GiB:,.1f} GiB at batch "
                             f"{wl.batch}, seq {wl.seq} ({plural(K, 'layer')}), more than the "
                             f"{default_budget() / GiB:.0f} GiB budget; lower --seq or --batch")
    secs = work_seconds(model, wl, K)
    if secs > WORK_BUDGET_S:
        raise ShapecalcError("memory", f"verify --train would take about {secs:,.0f} s at batch "
                             f"{wl.batch}, seq {wl.seq}, more than the {WORK_BUDGET_S:.0f} s "
                             "budget; lower --seq or --batch")


def _train_verify(model: ModelConfig, wl: Workload, K: int, plan: Any, seed: int, fd: bool,
                  recompute: str) -> dict[str, Any]:
    w = Weights(model, seed, np.float64, p=wl.tp, std=STD)
    ids = np.random.default_rng(seed + 1).integers(0, model.vocab_size, (wl.batch, wl.seq))
    ops, logits = _run(TapeOps, model, wl, w, ids, K)
    loss, dlogits = cross_entropy(logits[0], ids)
    bw = backward(ops, logits, dlogits)

    sym = symbolic.stages(model, wl, wl.tp)
    checks = compare_stages(ops.stages, sym, plan, K, f"forward, p={wl.tp}")[:1]
    checks += _shape_checks(bw, w)
    checks += _flop_checks(ops.stages, sym, bw, model, plan, K)
    if recompute != "none":
        again = backward(ops, logits, dlogits, rerun=_rerun(recompute, ops))
        checks += _recompute_checks(ops.stages, sym, bw, again, recompute, model, plan, K)
    fd_doc = None
    if fd:
        c, fd_doc = _fd_check(model, wl, w, ids, K, bw, seed)
        checks.append(c)
    return {
        "model": model.name, "workload": wl.model_dump(), "layers_run": K,
        "sizes": {"d_model": model.d_model, "d_ff": model.d_ff, "vocab_size": model.vocab_size,
                  "n_heads": model.n_heads, "n_kv_heads": model.kv_heads, "head_dim": model.dh,
                  "n_experts": model.n_experts, "d_ff_expert": model.dff_expert},
        "precision": "float64", "recompute": recompute, "loss": loss, "checks": checks,
        "finite_differences": fd_doc, "ok": all(c["ok"] for c in checks),
    }


def _shape_checks(bw: Backward, w: Weights) -> list[dict]:
    # AFMoE's routing bias only chooses experts (requires_grad False): no gradient reaches it
    read = sorted(repr(k) for k in w.full if k[1:] != ("moe.route", "bias"))
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
    for title, key, got in (("dX", "backward_dx_flops", ctx.dx),
                            ("dW", "backward_dw_flops", ctx.dw)):
        per_layer = [0] * K
        outside = 0
        for j, s in enumerate(num):
            if s.group == "block":
                per_layer[s.extra["layer"]] += got[j]
            else:
                outside += got[j]
        measured = outside + _kind_total(per_layer, plan)
        checks.append(_check(f"total backward {title} FLOPs (all N layers)", total[key],
                             _exact(measured)))
    return checks


def _rerun(how: str, ops: TapeOps) -> Callable[[list[Entry]], list[Entry]]:
    """Which of a layer's operations its backward re-runs under `how` (train/backward.py's
    rules, on the stages each operation recorded)."""
    def pick(entries: list[Entry]) -> list[Entry]:
        if how == "full":
            return entries
        if how == "selective":
            return [e for e in entries if e.stages
                    and all(ops.stages[i].role in SELECTIVE_ROLES for i in e.stages)]
        idx = sorted(i for e in entries for i in e.stages)
        skip = {idx[j] for j in torch_skipped([ops.stages[i] for i in idx])}
        return [e for e in entries if not set(e.stages) <= skip or not e.stages]
    return pick


def _recompute_checks(num: list[Stage], sym: list[Stage], bw: Backward, again: Backward,
                      how: str, model: ModelConfig, plan: Any, K: int) -> list[dict]:
    """The FLOPs the backward re-ran, per layer and in total, against train/backward.py; and the
    gradients from recomputed residuals against those kept."""
    per_kind: dict[int | None, int] = {}
    for s in recompute_stages(sym, how):
        per_kind[s.kind] = per_kind.get(s.kind, 0) + s.flops
    ran = [0] * K
    for i, f in again.recomputed.items():
        ran[num[i].extra["layer"]] += f
    want = [per_kind.get(plan.kind_of[L], 0) for L in range(K)]
    c1 = _check(f"recompute FLOPs per layer ({how})", sum(want), sum(ran), want == ran)
    if want != ran:
        L = next(i for i in range(K) if want[i] != ran[i])
        c1["detail"] = f"layer {L}: symbolic {want[L]}, measured {ran[L]}"
    c2 = _check(f"total recompute FLOPs ({how}, all N layers)",
                step_flops(sym, model.n_layers, how)["recompute_flops"],
                _exact(_kind_total(ran, plan)))
    keys = list(bw.grads.g)
    c3 = _close(f"gradients with recompute ({how}) == kept residuals",
                np.concatenate([again.grads.g[k].ravel() for k in keys]),
                np.concatenate([bw.grads.g[k].ravel() for k in keys]), 1e-12)
    return [c1, c2, c3]


def _group(key: tuple) -> tuple:
    """Routed experts' tensors of one (layer, role) form one group (one direction for all E);
    every other tensor is its own."""
    if len(key) >= 3 and isinstance(key[2], int):
        return (*key[:2], "expert *", *key[3:])
    return key


def _fd_check(model: ModelConfig, wl: Workload, w: Weights, ids: np.ndarray, K: int,
              bw: Backward, seed: int) -> tuple[dict, dict]:
    """Per group of tensors, one central difference along v: in each tensor, its largest-
    gradient entry plus a seeded random one, with seeded signs; against ⟨g, v⟩."""
    rng = np.random.default_rng(seed + 2)
    groups: dict[tuple, list[tuple]] = {}
    for key in sorted(w.full, key=repr):
        groups.setdefault(_group(key), []).append(key)
    worst, worst_key, rows, entries = 0.0, "", [], 0
    for gkey, keys in groups.items():
        picks = []  # (tensor, entry, sign)
        for key in keys:
            theta = w.full[key]
            g = bw.grads.g.get(key, np.zeros_like(theta))
            for i in sorted({int(np.argmax(np.abs(g))), int(rng.integers(theta.size))}):
                picks.append((key, i, float(rng.choice((-1.0, 1.0)))))
        an = sum(sgn * float(bw.grads.g[k].flat[i]) for k, i, sgn in picks if k in bw.grads.g)
        h = FD_STEP * max(1.0, max(abs(float(w.full[k].flat[i])) for k, i, _ in picks))
        old = [w.full[k].flat[i] for k, i, _ in picks]

        def move(by: float, picks: list = picks, old: list = old) -> None:
            for (k, i, sgn), o in zip(picks, old, strict=True):
                w.full[k].flat[i] = o + by * sgn

        move(h)
        up = _loss(model, wl, w, ids, K)
        move(-h)
        down = _loss(model, wl, w, ids, K)
        move(0.0)
        fd = (up - down) / (2 * h)
        entries += len(picks)
        err = abs(fd - an)
        rel = err / abs(an) if abs(an) > FD_FLOOR else (0.0 if err <= FD_FLOOR else float("inf"))
        rows.append({"tensors": repr(gkey), "count": len(keys), "entries": len(picks),
                     "gradient": an, "finite_difference": fd, "relative_error": rel})
        if rel >= worst:
            worst, worst_key = rel, repr(gkey)
    w.shards.clear()
    c = {"name": f"gradients vs finite differences ({len(w.full)} tensors, {len(rows)} "
                 "directions)",
         "symbolic": 0.0, "measured": worst, "tolerance": FD_TOL, "ok": worst <= FD_TOL}
    if worst > FD_TOL:
        c["detail"] = f"{worst_key}: relative error {worst:.3g}"
    return c, {"tolerance": FD_TOL, "step": FD_STEP, "floor": FD_FLOOR,
               "norm": "relative, per direction: |d_fd − ⟨g,v⟩| / |⟨g,v⟩|", "directions": rows}
