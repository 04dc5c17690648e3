"""DeepSeek-V4's routing and activation variants (issue 20 item 4): hash routing (the k experts
a function of the token id), the sqrtsoftplus scoring, router logit softcaps (Laguna) and clamped
SwiGLU. verify runs each in NumPy; the hash layers route by id; bad configs exit 2 naming the key;
train refuses them in one line."""

from __future__ import annotations

import json

import numpy as np
import pytest

from shapecalc.check.verify import verify
from shapecalc.interpret import moe, symbolic
from shapecalc.interpret.numeric import step
from shapecalc.interpret.weights import Weights
from shapecalc.model.config import ModelConfig, Workload
from shapecalc.model.plan import layer_plan

V4ISH = dict(vocab_size=64, d_model=32, n_layers=4, n_heads=4, n_kv_heads=2, head_dim=8, d_ff=48,
             ffn="swiglu", norm="rmsnorm", positions="rope", n_experts=4, experts_per_token=2,
             n_shared_experts=1, d_ff_expert=16, router_scoring="sqrtsoftplus",
             norm_topk_prob=True, hash_moe_layers=2, swiglu_limit=0.5, router_softcap=5.0,
             routed_scaling_factor=1.5)


@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_verify_passes(phase):
    r = verify(ModelConfig(**V4ISH), Workload(batch=2, seq=5, phase=phase, dtype="fp32", tp=2),
               precision="float64")
    assert not [c for c in r["checks"] if not c["ok"]]


def test_hash_layers_route_by_token_id_and_count_no_top_k():
    m = ModelConfig(**V4ISH)
    plan = layer_plan(m)
    assert [k.label for k in plan.kinds] == ["full attention · hash MoE", "full attention · MoE"]
    assert plan.counts == (2, 2)
    ids = np.array([[3, 9, 3, 60, 1]])
    s = step(m, Workload(batch=1, seq=5, dtype="fp32"), Weights(m, dtype=np.float64), ids)
    for layer in (0, 1):  # the same token, the same experts, whatever its hidden state
        assert (s.routed[layer] == moe.tid2eid(ids, 2, 4)).all()
    assert (s.routed[layer][0, 0] == s.routed[layer][0, 2]).all()
    st = symbolic.stages(m, Workload(batch=1, seq=5))
    ew = {s.kind: s.elementwise_flops for s in st if s.role == "moe.route"}
    E, k, T = 4, 2, 5
    assert ew[0] == T * (4 * E + 2 * k)  # √softplus over E, the k renormalised: no top-k pass
    assert ew[1] == T * (4 * E + E + 2 * k)


def test_clamped_swiglu_clamps():
    """A tighter limit changes the logits; each clamp is one pass over its tensor."""
    ids = np.array([[5, 7, 11]])
    out = []
    for limit in (1e-4, 1e-2, None):
        m = ModelConfig(**{**V4ISH, "swiglu_limit": limit})
        out.append(step(m, Workload(batch=1, seq=3, dtype="fp32"),
                        Weights(m, dtype=np.float64), ids).logits)
    assert not np.allclose(out[0], out[1]) and not np.allclose(out[1], out[2])
    st = symbolic.stages(ModelConfig(**V4ISH), Workload(batch=1, seq=3))
    clamps = [s for s in st if s.op == "clamp" and s.kind == 0]
    assert [s.role for s in clamps] == ["moe.experts.clamp"] * 2 + ["moe.shared.clamp"] * 2
    assert clamps[0].elementwise_flops == 3 * 2 * 16  # B·T·k·Dff_e


@pytest.mark.slow
def test_sqrtsoftplus_is_transformers_own():
    torch = pytest.importorskip("torch")
    from transformers.activations import ACT2FN

    z = np.linspace(-30, 30, 101)
    ref = ACT2FN["sqrtsoftplus"](torch.tensor(z)).numpy()
    assert np.allclose(moe._scores("sqrtsoftplus", z)[0], ref, rtol=1e-12)


@pytest.mark.parametrize(("sets", "field"), [
    (["swiglu_limit=7"], "swiglu_limit"),  # seed-tiny is a GELU model
    (["router_softcap=3"], "router_softcap"),  # no experts
    (["n_experts=4", "experts_per_token=2", "hash_moe_layers=9"], "hash_moe_layers"),
    (["router_scoring=cubic"], "router_scoring"),
])
def test_bad_configs_exit_2_naming_the_key(cli, sets, field):
    r = cli("trace", *[a for s in sets for a in ("--set", s)])
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1 and "Traceback" not in r.err
    assert field in r.err


@pytest.mark.parametrize("key", ["swiglu_limit", "hash_moe_layers", "router_softcap",
                                 "router_scoring"])
def test_train_refuses_in_one_line(cli, tmp_path, key):
    fields = {**V4ISH, "swiglu_limit": None, "hash_moe_layers": 0, "router_softcap": None,
              "router_scoring": "softmax", key: V4ISH[key]}
    cfg = tmp_path / "m.json"
    cfg.write_text(json.dumps(fields))
    r = cli("train", "--config", str(cfg))
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1 and key in r.err


def test_closed_form_equals_the_stages():
    import random

    from shapecalc.costs.closed import ClosedForm
    from tests.test_closed import assert_equal_at

    m = ModelConfig(**{**V4ISH, "hc_streams": 2})
    rng = random.Random(1)
    points = [dict(batch=rng.randint(1, 9), seq=rng.randint(1, 80),
                   phase=rng.choice(["prefill", "decode"]), tp=rng.choice([1, 2]),
                   pp=rng.randint(1, 4), dtype="bf16", kv_dtype="bf16", act_dtype="fp32")
              for _ in range(6)]
    assert_equal_at(m, ClosedForm(m), points)
