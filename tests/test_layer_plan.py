"""A model with two kinds of layer (2 with a window of 4 tokens, then 2 full): the layer plan, and
trace, closed form, planning and verify agreeing on it, against hand calculations."""

from __future__ import annotations

import itertools

import pytest

from shapecalc.check.verify import verify
from shapecalc.costs.closed import ClosedForm
from shapecalc.costs.grid import evaluate
from shapecalc.costs.trace import build_trace
from shapecalc.inputs.hardware import load_gpu
from shapecalc.model.config import ModelConfig, ShapecalcError, Workload
from shapecalc.model.parallel import stage_kind_counts
from shapecalc.model.plan import layer_plan
from shapecalc.plan.fit import fit
from shapecalc.plan.options import PlanOptions

D, H, HKV, DH, DFF, V, W = 16, 4, 2, 4, 32, 50, 4
TWO = ModelConfig(name="two-kinds", vocab_size=V, d_model=D, n_layers=4, n_heads=H,
                  n_kv_heads=HKV, d_ff=DFF, ffn="swiglu", norm="rmsnorm", positions="rope",
                  sliding_window=W, layer_types=("sliding", "sliding", "full", "full"))
ALTERNATING = TWO.model_copy(update={"layer_types": ("sliding", "full", "sliding", "full")})


def kv_bytes(B: int, tokens: int, layers: int, bytes_per: int = 2) -> int:
    """2·layers·B·H_kv·tokens·Dh·bytes (the seeds' KV cache formula)."""
    return 2 * layers * B * HKV * tokens * DH * bytes_per


def test_the_plan_has_two_kinds_in_two_runs():
    plan = layer_plan(TWO)
    assert [(k.attention, k.window) for k in plan.kinds] == [("sliding", W), ("full", None)]
    assert plan.counts == (2, 2) and plan.kind_of == (0, 0, 1, 1)
    assert [(r.first, r.length) for r in plan.runs] == [(0, 2), (2, 2)]
    assert plan.covering() == 3
    alt = layer_plan(ALTERNATING)
    assert len(alt.runs) == 4 and alt.counts == (2, 2) and alt.covering() == 2
    assert stage_kind_counts(alt, 2) == [[1, 1], [1, 1]]
    assert stage_kind_counts(layer_plan(TWO), 2) == [[2, 0], [0, 2]]


@pytest.mark.parametrize("bad", [
    {"layer_types": ("sliding", "full")},  # 2 types for 4 layers
    {"layer_types": ("full",) * 4},  # a window no layer uses
    {"sliding_window": None},  # sliding layers without a window
])
def test_inconsistent_plans_are_refused(bad):
    with pytest.raises(ShapecalcError):
        TWO.model_copy(update=bad)


@pytest.mark.parametrize(("phase", "T"), [("prefill", 3), ("prefill", 9), ("decode", 2),
                                          ("decode", 9)])
def test_trace_kv_cache_sums_the_kinds(phase, T):
    B = 2
    doc = build_trace(TWO, Workload(batch=B, seq=T, phase=phase))
    n = T + (phase == "decode")
    # 2 layers hold min(n, W) tokens, 2 layers hold n
    assert doc["totals"]["kv_cache_bytes"] == kv_bytes(B, min(n, W), 2) + kv_bytes(B, n, 2)
    assert doc["totals"]["kv_cache_tokens"] == n
    # paged (block 16): one block table per window group
    blocks = B * -(-min(n, W) // 16) + B * -(-n // 16)
    assert doc["totals"]["kv_cache_blocks"] == blocks
    per_tok_layer = 2 * HKV * DH * 2
    assert doc["totals"]["kv_cache_paged_bytes"] == blocks * 16 * 2 * per_tok_layer
    kinds = doc["layers"]["kinds"]
    assert [(k["label"], k["count"]) for k in kinds] == [
        (f"sliding window W={W}", 2), ("full attention", 2)]
    blocks_shown = [s for s in doc["stages"] if s["role"] == "attn.norm"]
    assert [(s["kind"], s["repeat"]) for s in blocks_shown] == [(0, 2), (1, 2)]


def test_params_and_pp_ledger_by_kind():
    per_layer = D * H * DH + 2 * D * HKV * DH + H * DH * D + 3 * D * DFF + 2 * D
    doc = build_trace(TWO, Workload(batch=1, seq=9, pp=2))
    pb = doc["totals"]["params_breakdown"]
    assert doc["totals"]["params"] == 4 * per_layer + 2 * V * D + D
    assert [k["per_layer"] for k in pb["per_kind"]] == [per_layer, per_layer]
    assert pb["layers"] == 4 * per_layer
    pp = doc["parallel"]["pp"]
    assert pp["kv_cache_bytes_per_stage"] == [kv_bytes(1, W, 2), kv_bytes(1, 9, 2)]
    assert pp["params_per_stage"] == [2 * per_layer + V * D, 2 * per_layer + D + V * D]


def test_closed_form_equals_the_trace_across_the_window():
    cf = ClosedForm(TWO)
    keys = ("params", "flops", "elementwise_flops", "kv_cache_bytes", "kv_cache_tokens",
            "kv_cache_blocks", "kv_cache_paged_bytes", "allreduce_bytes_total",
            "kv_cache_bytes_per_rank", "flops_per_rank", "weight_bytes_per_rank")
    for phase, T, B, p in itertools.product(("prefill", "decode"), range(1, 12), (1, 3),
                                            (1, 2)):
        wl = Workload(batch=B, seq=T, phase=phase, tp=p)
        doc = build_trace(TWO, wl)
        flat = {**doc["totals"], **doc["parallel"]["tp"]}
        got = evaluate(cf, B, T, phase, p)
        for k in keys:
            want = flat[k] if k != "largest" else None
            assert int(got[k][0]) == want, (k, phase, T, B, p)


@pytest.mark.parametrize("pp", [1, 2, 4])
def test_fit_memory_follows_the_kinds_on_each_stage(pp):
    gpu = load_gpu("h100-sxm")
    B, T = 2, 40
    doc = fit(TWO, Workload(batch=B, seq=T, pp=pp, logits="last"), gpu, PlanOptions())
    tok_layer = 2 * HKV * DH * 2
    slots = {"sliding": B * -(-W // 16) * 16, "full": B * -(-T // 16) * 16}
    kinds = ["sliding", "sliding", "full", "full"]
    per_stage = {1: [kinds], 2: [kinds[:2], kinds[2:]], 4: [[k] for k in kinds]}[pp]
    kv = [sum(slots[k] for k in stage) * tok_layer for stage in per_stage]
    mem = doc["memory_per_rank"]
    assert mem["kv_cache"] == kv[doc["pp_stage"]]
    tr = build_trace(TWO, Workload(batch=B, seq=T, pp=pp, logits="last"))
    assert mem["weights"] == tr["parallel"]["pp"]["weight_bytes_per_stage"][doc["pp_stage"]]


@pytest.mark.parametrize("model", [TWO, ALTERNATING], ids=["runs", "alternating"])
@pytest.mark.parametrize("wl", [
    Workload(batch=2, seq=6, phase="prefill"),
    Workload(batch=2, seq=6, phase="decode", tp=2, pp=2),
], ids=["prefill", "decode-tp2-pp2"])
def test_verify_runs_every_kind_and_agrees(model, wl):
    doc = verify(model, wl, precision="float64")
    assert doc["ok"], [c for c in doc["checks"] if not c["ok"]]
    assert doc["layers_run"] >= layer_plan(model).covering()


def test_verify_extrapolates_each_kind():
    doc = verify(TWO, Workload(batch=1, seq=6), layers=3, precision="float64")
    assert doc["ok"] and "×2/2 sliding window W=4, ×2/1 full attention" in doc["note"]
    with pytest.raises(ShapecalcError, match="layers"):
        verify(TWO, Workload(batch=1, seq=6), layers=2)


def test_cli_reads_layer_types_from_a_config(cli, tmp_path):
    f = tmp_path / "two.toml"
    f.write_text('vocab_size = 50\nd_model = 16\nn_layers = 4\nn_heads = 4\nn_kv_heads = 2\n'
                 'd_ff = 32\nffn = "swiglu"\nnorm = "rmsnorm"\npositions = "rope"\n'
                 'sliding_window = 4\nlayer_types = ["sliding", "sliding", "full", "full"]\n')
    r = cli("trace", "--config", str(f), "--seq", "9", "--json")
    assert r.code == 0, r.err
    assert r.json()["totals"]["kv_cache_bytes"] == kv_bytes(1, W, 2) + kv_bytes(1, 9, 2)
    table = cli("trace", "--config", str(f), "--seq", "9")
    assert "block  × 2 layers: sliding window W=4" in table.out
    assert "block  × 2 layers: full attention" in table.out
    bad = cli("trace", "--config", str(f), "--set", 'layer_types=["full"]')
    assert bad.code == 2 and "layer_types" in bad.err


def test_verify_fails_when_the_symbolic_side_ignores_a_window(monkeypatch):
    from shapecalc.model.forward import Sizes

    real = Sizes.keys

    def no_window(self, spec):  # every layer traced as full attention
        return real(self, spec._replace(window=None, attention="full"))

    monkeypatch.setattr(Sizes, "keys", no_window)
    doc = verify(TWO, Workload(batch=1, seq=6, phase="decode"), precision="float64")
    bad = {c["name"] for c in doc["checks"] if not c["ok"]}
    assert "KV cache bytes (all layers)" in bad and "stage bytes (decode, p=1)" in bad


def test_stages_carry_their_operands_and_verify_checks_them(monkeypatch):
    doc = build_trace(TWO, Workload(batch=2, seq=8, tp=2))
    by_role = {s["role"]: s for s in doc["stages"] if s["kind"] == 1}
    # QKᵀ: [B,H,T,Dh] × [B,H,Dh,T]; the q projection: [B,T,D] × [D,H·Dh]
    assert by_role["attn.scores"]["operands"] == [[2, H, 8, DH], [2, H, DH, 8]]
    assert by_role["attn.scores"]["operand_dims"] == [["B", "H", "T", "Dh"], ["B", "H", "Dh", "T"]]
    assert by_role["attn.q"]["operands"] == [[2, 8, D], [D, H * DH]]
    rank = build_trace(TWO, Workload(batch=2, seq=8, tp=2), per_rank=True)["rank_stages"]
    q = next(s for s in rank if s["role"] == "attn.q")
    assert q["operands"] == [[2, 8, D], [D, H * DH // 2]]
    assert q["operand_dims"][1] == ["D", "H·Dh/p"]

    from shapecalc.interpret import symbolic

    real = symbolic.SymbolicOps.linear

    def transposed(self, x, role, name, d_in, d_out, bias, split):
        out = real(self, x, role, name, d_in, d_out, bias, split)
        self.stages[-1].operands = self.stages[-1].operands[::-1]
        return out

    monkeypatch.setattr(symbolic.SymbolicOps, "linear", transposed)
    bad = {c["name"] for c in verify(TWO, Workload(batch=1, seq=6), precision="float64")["checks"]
           if not c["ok"]}
    assert "stage names and shapes (prefill, p=1)" in bad
