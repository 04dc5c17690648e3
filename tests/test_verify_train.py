"""`verify --train`: the backward executed by hand-written vector-Jacobian rules passes on every
preset (narrowed), on random configs and at p ranks, and fails when a rule or the symbolic count
is wrong; each rule passes the dot-product test ⟨u, J·v⟩ = ⟨Jᵀ·u, v⟩ on random shapes."""

from __future__ import annotations

import json
from functools import lru_cache

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from newer_presets import default_or_slow, preset, preset_names

from shapecalc.inputs import sources
from shapecalc.interpret import vjp, vjp_tape
from shapecalc.interpret.caches import ContiguousKV
from shapecalc.interpret.mixer_rules import TRAINABLE
from shapecalc.interpret.numeric import windows
from shapecalc.interpret.weights import Weights
from shapecalc.model.config import ModelConfig, ShapecalcError, Workload, check
from shapecalc.train import backward
from shapecalc.train import verify as tv
from shapecalc.train.memory import check_trainable
from shapecalc.train.verify import narrow, train_verify

# presets whose token mixers have no backward rule (interpret/mixer_rules.py): refused
# (test_mixers_without_a_rule_are_refused); the mixers with one run as every preset does
STATEFUL = sorted(n for n in preset_names()
                  if set(preset(n).mixers) - set(TRAINABLE))
# xIELU's learned scalars have no backward rule either: refused (test_xielu_is_refused_…)
XIELU = sorted(n for n in preset_names() if preset(n).ffn == "xielu")


def _no_rule(name: str) -> bool:
    """Another part without a backward rule (DeepSeek-V4's attention, DSA, Laguna's per-layer
    heads and gates, …): check_trainable refuses it."""
    try:
        check_trainable(preset(name))
    except ShapecalcError:
        return True
    return False


NO_RULE = sorted(n for n in set(preset_names()) - set(STATEFUL) - set(XIELU)
                 if _no_rule(n))
PRESETS = sorted(set(preset_names()) - set(STATEFUL) - set(XIELU) - set(NO_RULE))
MIXER_PRESETS = sorted(n for n in PRESETS
                       if set(preset(n).mixers) - {"attention", "none"})
# many layers to cover every kind, or hundreds of experts: their finite differences take
# seconds on a loaded machine (`pytest -m slow`); their shapes and FLOPs run by default
HEAVY = {"deepseek-v3", "gemma3-1b", "gemma3-4b", "gemma3-27b", "llama4-maverick",
         "llama4-scout", "kimi-k2", "gpt-oss-120b", "gpt-oss-20b", "deepseek-v2",
         "nemotron-nano-9b-v2"}
WL = Workload(batch=1, seq=4)


def failed(doc: dict) -> list[str]:
    return [c["name"] + ": " + c.get("detail", "") for c in doc["checks"] if not c["ok"]]


@pytest.mark.parametrize("name", default_or_slow(PRESETS))
def test_every_preset(name):
    doc = train_verify(narrow(sources.load_preset(name)), WL, fd=name not in HEAVY)
    assert not failed(doc)
    assert len(doc["checks"]) == 10 - (name in HEAVY)


def test_mixers_without_a_rule_are_refused(cli, monkeypatch):
    """A mixer is refused until its backward rule is registered: with Mamba-2's and gated
    DeltaNet's taken out of the registry, their presets are refused in one line naming them."""
    from shapecalc.train import memory

    assert len(MIXER_PRESETS) >= 4  # Nemotron-H, Qwen3-Next, Qwen3.5 and Qwen3.5-MoE
    for name in STATEFUL:  # mixers being added without a rule yet
        with pytest.raises(ShapecalcError) as info:
            train_verify(narrow(sources.load_preset(name)), WL)
        assert info.value.field == "model" and "backward" in info.value.reason
    monkeypatch.setattr(memory, "TRAINABLE", ("attention", "none"))
    for name in MIXER_PRESETS:
        m = sources.load_preset(name)
        with pytest.raises(ShapecalcError) as info:
            train_verify(narrow(m), WL)
        assert info.value.field == "model" and "backward" in info.value.reason
        assert all(x in info.value.reason for x in set(m.mixers) - {"attention", "none"})
    r = cli("train", "--preset", MIXER_PRESETS[0], "--gpu", "h100-sxm")
    assert r.code == 2 and r.out == "" and len(r.err.strip().splitlines()) == 1


def test_presets_with_parts_without_a_backward_rule_are_refused():
    assert "laguna" in NO_RULE
    for name in NO_RULE:
        with pytest.raises(ShapecalcError) as info:
            train_verify(narrow(sources.load_preset(name)), WL)
        assert "backward" in info.value.reason, name


def test_xielu_presets_are_refused():
    assert XIELU  # Apertus
    for name in XIELU:
        with pytest.raises(ShapecalcError) as info:
            train_verify(narrow(sources.load_preset(name)), WL)
        assert info.value.field == "ffn" and "backward" in info.value.reason


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(HEAVY))
def test_heavy_presets_finite_differences(name):
    assert not failed(train_verify(narrow(sources.load_preset(name)), WL))


@pytest.mark.parametrize("name", ["llama3-8b", "gpt2", "mixtral-8x7b", "starcoder",
                                  "stablelm-2-1.6b", "deepseek-v2-lite", "gemma2-9b"])
def test_tensor_parallel(name):
    """p=2: column, row, vocabulary and (starcoder, one KV head) replicated-KV shards, each
    rank's weight gradient scattered back into the full matrix."""
    doc = train_verify(narrow(sources.load_preset(name)), WL.model_copy(update={"tp": 2}))
    assert not failed(doc)


def test_fd_numbers():
    """The finite differences are real: the loss is ln-scale, and ⟨g, v⟩ is far above the
    noise floor in every direction of a dense model."""
    doc = train_verify(narrow(sources.load_preset("llama3-8b")), WL)
    fd = doc["finite_differences"]
    assert fd["tolerance"] == 1e-4 and 2 < doc["loss"] < 50
    # 2 norms + q, k, v, o, gate, up, down + embedding, final norm, lm head
    assert len(fd["directions"]) == 12
    for d in fd["directions"]:
        assert abs(d["gradient"]) > 1e3 * fd["floor"]
        assert abs(d["finite_difference"] - d["gradient"]) <= 1e-4 * abs(d["gradient"])


# -- it can fail ----------------------------------------------------------------------------------
def _fd_only_fails(doc: dict) -> None:
    bad = [c["name"] for c in doc["checks"] if not c["ok"]]
    assert len(bad) == 1 and bad[0].startswith("gradients vs finite differences"), bad


def test_wrong_rule_is_caught(monkeypatch):
    """The RoPE rule without its rotation term, and the scale rule without its factor: the FLOPs
    and shapes still agree, the finite differences do not."""
    model = narrow(sources.load_preset("llama3-8b"))
    monkeypatch.setitem(vjp.RULES, "rope", lambda c, dys: [dys[0] * 1.0])
    _fd_only_fails(train_verify(model, WL))
    monkeypatch.undo()
    monkeypatch.setitem(vjp.RULES, "scale", lambda c, dys: [dys[0]])
    _fd_only_fails(train_verify(model, WL))


def test_wrong_norm_rule_is_caught(monkeypatch):
    """RMSNorm's backward without the term through its 1/rms (dx = r·dŷ only)."""
    monkeypatch.setattr(vjp, "_normalized_grad", lambda dyh, yh, x, kind: dyh / np.sqrt(
        np.square(x).mean(axis=-1, keepdims=True) + 1e-5))
    _fd_only_fails(train_verify(narrow(sources.load_preset("llama3-8b")), WL))


def test_wrong_gradient_shape_is_caught(monkeypatch):
    """kᵀ's rule without its transpose: a [T,Dh] gradient for a [Dh,T] activation (T ≠ Dh)."""
    monkeypatch.setitem(vjp.RULES, "transpose_last", lambda c, dys: dys)
    doc = train_verify(narrow(sources.load_preset("llama3-8b")), Workload(batch=1, seq=6))
    c = next(c for c in doc["checks"] if c["name"] == "gradient shapes (activations)")
    assert not c["ok"] and c["measured"] == c["symbolic"] - 1
    assert "transpose_last" in c["detail"]


def test_wrong_symbolic_backward_is_caught(monkeypatch):
    """train/backward.py counting one operand gradient of QKᵀ instead of two."""
    real = backward.backward_stages

    def one_operand(st):
        return [b._replace(dx_flops=b.dx_flops // 2) if b.role == "attn.scores" else b
                for b in real(st)]

    monkeypatch.setattr(backward, "backward_stages", one_operand)
    monkeypatch.setattr(tv, "backward_stages", one_operand)
    doc = train_verify(narrow(sources.load_preset("llama3-8b")), WL, fd=False)
    bad = [c["name"] for c in doc["checks"] if not c["ok"]]
    assert bad == ["backward dX FLOPs per stage", "total backward dX FLOPs (all N layers)"]
    c = next(c for c in doc["checks"] if c["name"] == "backward dX FLOPs per stage")
    assert "QKᵀ" in c["detail"]


def test_wrong_measured_flops_are_caught(monkeypatch):
    """A rule that books a matmul to the wrong part (dW as dX) is seen per stage."""
    real = vjp.Ctx.mm

    def swapped(self, a, b, part, role=None):
        return real(self, a, b, "dx" if part == "dw" else part, role)

    monkeypatch.setattr(vjp.Ctx, "mm", swapped)
    doc = train_verify(narrow(sources.load_preset("gpt2")), WL, fd=False)
    assert not next(c for c in doc["checks"] if c["name"] == "backward dW FLOPs per stage")["ok"]


@pytest.mark.parametrize("how", ["selective", "full", "torch"])
@pytest.mark.parametrize("name", ["llama3-8b", "gpt2", "mixtral-8x7b", "gemma2-9b"])
def test_recompute(name, how):
    """Each layer's backward re-runs its stages (train/backward.py's rules): the FLOPs re-run
    equal the symbolic recompute count, and the gradients equal those from kept residuals."""
    doc = train_verify(narrow(sources.load_preset(name)), WL, fd=False, recompute=how)
    assert not failed(doc)
    rc = [c for c in doc["checks"] if "recompute" in c["name"]]
    assert len(rc) == 3 and rc[0]["measured"] > 0


def test_full_recompute_needs_no_kept_residual():
    """With every block operation's residuals and stage outputs dropped after the forward, full
    recompute still gives the same gradients: the backward reads only what it re-ran."""
    model, wl = narrow(sources.load_preset("mixtral-8x7b")), WL.model_copy(update={"logits": "all"})
    w = Weights(model, 0, np.float64, std=tv.STD)
    ids = np.random.default_rng(1).integers(0, model.vocab_size, (1, 4))
    ops, logits = tv._run(vjp_tape.TapeOps, model, wl, w, ids, 1)
    _, dl = vjp_tape.cross_entropy(logits[0], ids)
    kept = vjp_tape.backward(ops, logits, dl).grads.g
    for e in ops.tape:
        if e.layer >= 0:
            e.saved = {}
            for i in e.stages:
                ops.stages_out[i] = None
    again = vjp_tape.backward(ops, logits, dl, rerun=lambda entries: entries)
    assert again.recomputed and all(np.array_equal(kept[k], again.grads.g[k]) for k in kept)


def test_wrong_recompute_count_is_caught(monkeypatch):
    """train/backward.py's selective recompute forgetting A·V."""
    real = backward.recompute_stages

    def without_values(st, how):
        return [s for s in real(st, how) if s.role != "attn.values"]

    monkeypatch.setattr(backward, "recompute_stages", without_values)
    monkeypatch.setattr(tv, "recompute_stages", without_values)
    doc = train_verify(narrow(sources.load_preset("llama3-8b")), WL, fd=False,
                       recompute="selective")
    bad = [c["name"] for c in doc["checks"] if not c["ok"]]
    assert bad == ["recompute FLOPs per layer (selective)",
                   "total recompute FLOPs (selective, all N layers)"]


def test_refusals():
    m = narrow(sources.load_preset("llama3-8b"))
    for update, field in (({"attention_flops": "causal"}, "attention_flops"),
                          ({"phase": "decode"}, "phase"), ({"pp": 2}, "pp"),
                          ({"padding_mask": True}, "padding_mask")):
        with pytest.raises(ShapecalcError) as e:
            train_verify(m, WL.model_copy(update=update))
        assert e.value.field == field
    for layers in (0, m.n_layers + 1):  # K must cover every kind of layer and be at most N
        with pytest.raises(ShapecalcError) as e:
            train_verify(m, WL, layers=layers)
        assert e.value.field == "layers"


# -- random configs -------------------------------------------------------------------------------
@st.composite
def configs(draw):
    H = draw(st.sampled_from([1, 2, 4]))
    kv = draw(st.sampled_from([k for k in (1, 2, 4) if H % k == 0]))
    positions = draw(st.sampled_from(["learned", "sinusoidal", "rope", "none"]))
    pre = draw(st.booleans())
    model = ModelConfig(
        vocab_size=draw(st.integers(5, 40)), d_model=draw(st.sampled_from([8, 12])),
        head_dim=draw(st.sampled_from([2, 4])), n_layers=draw(st.integers(1, 2)), n_heads=H,
        n_kv_heads=kv, d_ff=4 * draw(st.integers(1, 3)),
        ffn=draw(st.sampled_from(["gelu", "relu", "swiglu", "geglu"])),
        norm=draw(st.sampled_from(["layernorm", "rmsnorm"])),
        norm_position="pre" if pre else "post", positions=positions,
        max_positions=16 if positions == "learned" else None,
        tie_embeddings=draw(st.booleans()), qkv_bias=draw(st.booleans()),
        attn_out_bias=draw(st.booleans()), ffn_bias=draw(st.booleans()),
        lm_head_bias=draw(st.booleans()), fused_qkv=draw(st.booleans()),
        parallel_block=pre and draw(st.booleans()),
        sliding_window=draw(st.sampled_from([None, 2])),
        embedding_scale=draw(st.booleans()),
    )
    tp = draw(st.sampled_from([p for p in (1, 2) if H % p == 0 and model.d_ff % p == 0
                               and (kv % p == 0 if kv >= p else p % kv == 0)]))
    return model, Workload(batch=draw(st.integers(1, 2)), seq=draw(st.integers(2, 5)), tp=tp)


@settings(max_examples=12)
@given(configs())
def test_random_configs(case):
    model, wl = case
    try:
        check(model, wl)
    except ShapecalcError:
        return
    assert not failed(train_verify(model, wl))


# -- each rule: the dot-product test --------------------------------------------------------------
TINY = ModelConfig(vocab_size=16, d_model=8, n_layers=1, n_heads=2, head_dim=4, d_ff=12,
                   ffn="swiglu", norm="layernorm", positions="rope")


@lru_cache(maxsize=1)
def _weights() -> Weights:
    return Weights(TINY, 0, np.float64, std=0.3)


def _ops(B: int, T: int) -> vjp_tape.TapeOps:
    model, wl = TINY, Workload(batch=B, seq=T)
    ops = vjp_tape.TapeOps(model, wl, _weights(), 1, np.zeros((B, T), dtype=np.int64),
                      ContiguousKV(wl.kv, windows(model), np.float64))
    ops._layer = 0
    return ops


# op: (input shapes from (B, T), call)
OPS = {
    "scale": (lambda B, T: [(1, B, T, 8)], lambda o, x: o.scale(x, "x", "s", 0.7, "")),
    "softcap": (lambda B, T: [(1, B, T, 8)], lambda o, x: o.softcap(x, "x", "c", 2.0)),
    "layernorm": (lambda B, T: [(1, B, T, 8)], lambda o, x: o.norm(x, "attn.norm", "n")),
    "rmsnorm": (lambda B, T: [(1, B, T, 8)],
                lambda o, x: o.norm(x, "attn.norm", "n", None, "rmsnorm")),
    "l2norm": (lambda B, T: [(1, B, 2, T, 4)],
               lambda o, x: o.norm(x, "q", "n", None, "l2norm")),
    "head_norm": (lambda B, T: [(1, B, 2, T, 4)],
                  lambda o, x: o.head_norm(x, "attn.q_norm", "n", 2)),
    "linear": (lambda B, T: [(1, B, T, 8)],
               lambda o, x: o.linear(x, "ffn.up", "u", 8, 12, False, "column")),
    "gelu": (lambda B, T: [(1, B, T, 8)], lambda o, x: o.activation(x, "a", "a", "gelu")),
    "silu": (lambda B, T: [(1, B, T, 8)], lambda o, x: o.activation(x, "a", "a", "silu")),
    "sigmoid": (lambda B, T: [(1, B, T, 8)],
                lambda o, x: o.activation(x, "a", "a", "sigmoid")),
    "relu": (lambda B, T: [(1, B, T, 8)], lambda o, x: o.activation(x, "a", "a", "relu")),
    "mul": (lambda B, T: [(1, B, T, 8), (1, B, T, 8)], lambda o, a, b: o.mul(a, b, "m", "m")),
    "add": (lambda B, T: [(2, B, T, 8), (1, B, T, 8)], lambda o, a, b: o.add(a, b, "r", "r")),
    "matmul": (lambda B, T: [(1, B, 2, T, 4), (1, B, 2, 4, T)],
               lambda o, a, b: o.matmul(a, b, "attn.scores", "s", True, None)),
    "softmax": (lambda B, T: [(1, B, 2, T, T)], lambda o, x: o.softmax(x, "s", "s")),
    "mask": (lambda B, T: [(1, B, 2, T, T)], lambda o, x: o.mask(x, "m", "m", "causal")),
    "split_heads": (lambda B, T: [(1, B, T, 8)],
                    lambda o, x: o.split_heads(x, "attn.q.heads", "q", 2, 4)),
    "merge_heads": (lambda B, T: [(1, B, 2, T, 4)], lambda o, x: o.merge_heads(x, "m", "m")),
    "repeat_kv": (lambda B, T: [(1, B, 1, T, 4)],
                  lambda o, x: o.repeat_kv(x, "r", "r", 2, 2)),
    "transpose_last": (lambda B, T: [(1, B, 2, T, 4)],
                       lambda o, x: o.transpose_last(x, "t", "t")),
    "rope": (lambda B, T: [(1, B, 2, T, 4)],
             lambda o, x: o.rope(x, "attn.rope", "r", o.rope_angles(x.shape[-2], 4, 10000.0))),
    "allreduce": (lambda B, T: [(2, B, T, 8)], lambda o, x: o.allreduce(x, "c", "c")),
    "last_position": (lambda B, T: [(1, B, T, 8)],
                      lambda o, x: o.last_position(x, "l", "l")),
}


@pytest.mark.parametrize("op", sorted(OPS))
@settings(max_examples=6)
@given(B=st.integers(1, 2), T=st.integers(2, 4), seed=st.integers(0, 99))
def test_dot_product(op, B, T, seed):
    """⟨u, J·v⟩ (J·v by central differences, exact for linear ops) = ⟨Jᵀ·u, v⟩ (the rule)."""
    shapes, call = OPS[op]
    rng = np.random.default_rng(seed)
    xs = [rng.standard_normal(s) for s in shapes(B, T)]
    vs = [rng.standard_normal(s) for s in shapes(B, T)]
    ops = _ops(B, T)
    out = call(ops, *[x.copy() for x in xs])
    u = rng.standard_normal(out.shape)
    entry = ops.tape[-1]
    ctx = vjp.Ctx(ops, vjp.Grads(ops.w))
    ctx.e = entry
    grads = vjp.RULES[entry.op](ctx, [u])
    eps = 1e-6
    up = call(_ops(B, T), *[x + eps * v for x, v in zip(xs, vs, strict=True)])
    down = call(_ops(B, T), *[x - eps * v for x, v in zip(xs, vs, strict=True)])
    jv = (up - down) / (2 * eps)
    left = float((u * jv).sum())
    right = sum(float((g * v).sum()) for g, v in zip(grads, vs, strict=False))
    assert abs(left - right) <= 1e-6 * max(1.0, abs(left)), (op, left, right)


# -- the command ----------------------------------------------------------------------------------
def test_cli_json_is_deterministic(cli):
    a = cli("verify", "--train", "--preset", "qwen3-30b-a3b", "--batch", "1", "--seq", "4",
            "--json")
    b = cli("verify", "--train", "--preset", "qwen3-30b-a3b", "--batch", "1", "--seq", "4",
            "--json")
    assert a.code == 0 and a.out == b.out
    doc = json.loads(a.out)
    assert doc["ok"] and doc["sizes"]["n_experts"] == 128
    assert {"model", "workload", "layers_run", "sizes", "precision", "loss", "checks",
            "finite_differences", "ok"} <= set(doc)


def test_cli_refuses(cli):
    r = cli("verify", "--train", "--phase", "decode")
    assert r.code == 2 and r.err.startswith("error: phase:") and len(r.err.splitlines()) == 1
    r = cli("verify", "--train", "--precision", "float32")
    assert r.code == 2 and "precision" in r.err
    r = cli("verify", "--recompute", "full")
    assert r.code == 2 and r.err.startswith("error: recompute:")
    r = cli("verify", "--train", "--recompute", "some")
    assert r.code == 2 and r.err.startswith("error: recompute:")
