"""The stateful mixers' named conventions (model/conventions.py): the `fused` FLOPs of mamba_ssm's
and flash-linear-attention's kernels (interpret/fused.py), counted by hand on small cases and by
walking the kernels' loops; vLLM's state cache (K_c − 1 conv columns, mamba_ssm_cache_dtype)
by hand; every output names both; a flag that does not apply is refused in one line."""

from __future__ import annotations

import json
from math import comb

import pytest

from shapecalc.check.verify import verify
from shapecalc.costs.closed import ClosedForm
from shapecalc.costs.trace import build_trace
from shapecalc.interpret.fused import chunk_sums, kda_decode, kda_prefill, mamba1_scan
from shapecalc.model.config import ModelConfig, ShapecalcError, Workload
from shapecalc.model.expr import Dim, Expr

# one Mamba-2 layer: H_s=2 heads of D_s=2, G=1 group, N_s=3, K_c=4, chunks of L=4
MAMBA = dict(vocab_size=16, d_model=8, n_layers=1, n_heads=2, head_dim=4, d_ff=8, ffn="relu2",
             norm="rmsnorm", positions="none", mixer_types=["mamba2"], ffn_types=["none"],
             ssm_heads=2, ssm_head_dim=2, ssm_groups=1, ssm_state=3, conv_kernel=4, scan_chunk=4)
# one gated DeltaNet layer: H_qk=2, H_v=4, D_qk=8, D_hv=6, K_c=4, fla's chunk of 64
GDN = dict(vocab_size=16, d_model=8, n_layers=1, n_heads=2, head_dim=4, d_ff=8, ffn="relu2",
           norm="rmsnorm", positions="none", mixer_types=["gated_deltanet"], ffn_types=["none"],
           gdn_qk_heads=2, gdn_v_heads=4, gdn_qk_dim=8, gdn_v_dim=6, conv_kernel=4,
           scan_chunk=64)


def _flops(fields: dict, **wl: object) -> dict[str, int]:
    doc = build_trace(ModelConfig(**fields), Workload(**wl))  # type: ignore[arg-type]
    return {s["role"]: s["flops"] for s in doc["stages"]}


def test_mamba2_fused_by_hand():
    # T=5 in chunks of L=4: lengths 4 and 1 (no padding to 8)
    f = _flops(MAMBA, seq=5, mixer_flops="fused")
    assert f["ssm.scores"] == 2 * 1 * 3 * (4 * 4 + 1 * 1)  # 2·B·G·N_s·Σl² (per group) = 102
    assert f["ssm.diag"] == 2 * 2 * 2 * (10 + 1)  # 2·B·H_s·D_s·Σl(l+1)/2: pairs i ≥ j = 88
    assert f["ssm.chunk_states"] == f["ssm.off"] == 2 * 5 * 2 * 2 * 3  # 2·B·T·H_s·D_s·N_s = 120
    assert f["ssm.pass"] == 0  # _state_passing_fwd: elementwise
    assert f["ssm.conv"] == 2 * (4 + 2 * 1 * 3) * 4 * 5  # 2·B·D_conv·K_c·T = 400
    t = _flops(MAMBA, seq=5)  # transformers' torch path: T padded to T_L = 8, per head
    assert t["ssm.scores"] == 2 * 8 * 4 * 2 * 3 and t["ssm.conv"] == 2 * 10 * 4 * (5 + 3)
    d, dt = _flops(MAMBA, seq=5, phase="decode", mixer_flops="fused"), _flops(
        MAMBA, seq=5, phase="decode")
    assert d["ssm.readout"] == dt["ssm.readout"] == 2 * 2 * 2 * 3  # Σ_n S·C: tl.sum, a bmm
    assert (d["ssm.conv"], dt["ssm.conv"]) == (2 * 10 * 4, 2 * 10 * 4 * 2)  # 1 output, or 2


def test_gated_deltanet_fused_by_hand():
    # T=20: one chunk of l=20 tokens in fla's 16-blocks s = (16, 4)
    f = _flops(GDN, seq=20, mixer_flops="fused")
    pairs = (16 * 16 + 4 * 16 + 4 * 4)  # k·kᵀ's blocks (0,0), (1,0), (1,1) = 336
    assert f["gdn.ut"] == 2 * 4 * 8 * pairs  # 2·B·H_v·D_qk·P_kk = 21,504
    inverse = comb(16, 3) + comb(4, 3) + 4 * 16 * (4 + 16)  # 560 + 4 + 1,280 (Ai10's two dots)
    assert f["gdn.solve"] == 2 * 4 * (inverse + 20 * 20 * (8 + 6))  # and w, u = A·(…): 59,552
    assert f["gdn.scores"] == 2 * 4 * 20 * 20 * 8  # q·kᵀ, the whole l×l block: 25,600
    assert f["gdn.intra"] == 2 * 4 * 20 * 20 * 6  # A·v_new: 19,200
    assert f["gdn.v_new"] == f["gdn.inter"] == f["gdn.state"] == 2 * 4 * 20 * 8 * 6  # 7,680
    assert f["gdn.conv"] == 2 * (2 * 2 * 8 + 4 * 6) * 4 * 20  # 2·B·D_conv·K_c·T
    t = _flops(GDN, seq=20)  # torch: padded to 64, the solves uncounted
    assert t["gdn.solve"] == 0 and t["gdn.ut"] == 2 * 4 * 64 * 64 * 8
    d, dt = _flops(GDN, seq=20, phase="decode", mixer_flops="fused"), _flops(
        GDN, seq=20, phase="decode")
    assert d["gdn.update"] == d["gdn.readout"] == 2 * 4 * 8 * 6  # Sᵀk and Sᵀq: tl.sum
    assert dt["gdn.update"] == dt["gdn.readout"] == 0  # transformers: elementwise


def test_the_counts_ready_for_mamba1_and_kda():
    one, T = Dim.const(1), Dim.of("T", 20)
    # selective_scan_fn: out += h·C over N_s for each of I channels and T tokens
    assert mamba1_scan(one, T, Dim.const(6), Dim.const(4)) == (2 * 20 * 6 * 4, "48·T")
    # chunk_kda, T=20 in 16-blocks (16, 4), H=2, D_k=8, D_v=6: the token-parallel kernel's
    # pairs j ≤ i in each block, 136 + 10, and the inter kernel's block (1,0), 4·16: 210
    k = kda_prefill(one, T, 64, Dim.const(2), Dim.const(8), Dim.const(6), False)
    assert k["intra"][0] == 4 * 2 * 8 * (136 + 10 + 64)  # Aqk and Akk
    assert k["solve"][0] == 2 * 2 * (comb(16, 3) + comb(4, 3) + 4 * 16 * 20 + 400 * 14)
    assert k["attend"][0] == 2 * 2 * 400 * 6 and k["state"][0] == 2 * 2 * 20 * 8 * 6
    assert kda_decode(one, Dim.const(2), Dim.const(8), Dim.const(6))["readout"][0] == 192


def _kernel_walk(T: int, L: int) -> tuple[int, int, int, int]:
    """The kernels' loops, walked: SSD's C·Bᵀ (whole l×l) and causal scan (i ≥ j); fla's
    kkt_solve kernel: the 16-blocks present (i_tc < T), each lower pair of blocks one tl.dot,
    each diagonal block's substitution (rows 2 … s−1, the nonzero products), each merge."""
    sq = tri = pkk = inv = 0
    for start in range(0, T, L):
        n = min(L, T - start)
        sq += sum(1 for i in range(n) for j in range(n))
        tri += sum(1 for i in range(n) for j in range(n) if i >= j)
        s = [min(16, n - b) for b in range(0, n, 16)]
        pkk += sum(s[a] * s[b] for a in range(len(s)) for b in range(a + 1))
        for a, sa in enumerate(s):  # row i of the inverse: Σ_{j<k<i} A_ik·Ai_kj
            inv += sum(1 for i in range(sa) for j in range(i) for k in range(j + 1, i))
            for b in range(a):  # Ai_ab = −Ai_aa·(Σ_c A_ac·Ai_cb): one dot per c, then Ai_aa·
                inv += sum(sa * s[c] * s[b] for c in range(b, a)) + sa * sa * s[b]
    return sq, tri, pkk, inv


@pytest.mark.parametrize("L", [4, 64])
def test_chunk_sums_equal_the_kernels_loops_and_are_polynomials_per_regime(L):
    for T in (1, 2, 3, 5, 15, 16, 17, 33, 63, 64, 65, 100, 129):
        sums = chunk_sums(Dim.of("T", T), L, False)
        assert tuple(sums[k].value for k in ("sq", "tri", "pkk", "inv")) == _kernel_walk(T, L)
        poly = chunk_sums(Dim(T, Expr.sym("T")), L, True)  # the closed form's polynomials
        assert all(poly[k].value == sums[k].value for k in sums)


def test_vllm_state_cache_by_hand():
    m = ModelConfig(**MAMBA)
    conv, ssm = 4 + 2 * 1 * 3, 2 * 2 * 3  # D_conv = I + 2·G·N_s channels; H_s·D_s·N_s
    hf = build_trace(m, Workload(seq=16))["totals"]
    assert hf["state_cache_bytes"] == conv * 4 * 2 + ssm * 4  # K_c bf16 columns, fp32 state
    assert hf["state_cache_convention"] == "transformers"
    # vLLM (mamba_utils.py mamba2_state_shape): conv (conv_dim, K_c − 1); state (H_s, D_s, N_s)
    # in mamba_ssm_cache_dtype, "auto": the conv state's, the model dtype (bf16)
    v = build_trace(m, Workload(seq=16, state_cache="vllm"))["totals"]
    assert v["state_cache_bytes"] == conv * 3 * 2 + ssm * 2
    assert v["state_cache_convention"] == "vllm"
    v32 = build_trace(m, Workload(seq=16, state_cache="vllm", state_dtype="fp32"))["totals"]
    assert v32["state_cache_bytes"] == conv * 3 * 2 + ssm * 4  # NemotronH's vLLM hook: fp32
    # gated DeltaNet (gated_delta_net_state_shape): conv (2·H_qk·D_qk + H_v·D_hv, K_c − 1),
    # state (H_v, D_hv, D_qk)
    g = build_trace(ModelConfig(**GDN), Workload(seq=16, state_cache="vllm", batch=3))["totals"]
    assert g["state_cache_bytes"] == 3 * ((2 * 2 * 8 + 4 * 6) * 3 * 2 + 4 * 6 * 8 * 2)


def test_closed_form_follows_both_conventions():
    model = ModelConfig(**{**MAMBA, "n_layers": 2, "mixer_types": ["mamba2", "mamba2"],
                           "ffn_types": ["none", "dense"]})
    cf = ClosedForm(model, mixers=("fused", "vllm", "fp32"))
    for phase, T in (("prefill", 1), ("prefill", 3), ("prefill", 4), ("prefill", 5),
                     ("prefill", 17), ("prefill", 130), ("decode", 9)):
        got = cf.at(2, T, phase, 1)
        want = build_trace(model, Workload(batch=2, seq=T, phase=phase, mixer_flops="fused",
                                           state_cache="vllm", state_dtype="fp32"))["totals"]
        assert int(got["flops"]) == want["flops"], (phase, T)
        assert int(got["state_cache_bytes"]) == want["state_cache_bytes"]
    # gated DeltaNet's vLLM cache in the closed form; its fused inverse is cubic in T: refused
    gdn = ModelConfig(**GDN)
    got = ClosedForm(gdn, mixers=(None, "vllm", None)).at(1, 20, "prefill", 1)
    assert got["state_cache_bytes"] == build_trace(gdn, Workload(
        seq=20, state_cache="vllm"))["totals"]["state_cache_bytes"]
    with pytest.raises(ShapecalcError, match="mixer_flops: fused: fla's triangular inverse"):
        ClosedForm(gdn, mixers=("fused", None, None))


def test_outputs_name_the_conventions(cli, tmp_path):
    r = cli("trace", "--preset", "nemotron-nano-9b-v2", "--seq", "16", "--mixer-flops", "fused",
            "--state-cache", "vllm", "--json")
    tot = json.loads(r.out)["totals"]
    assert (tot["mixer_flops_convention"], tot["state_cache_convention"]) == ("fused", "vllm")
    r = cli("trace", "--preset", "nemotron-nano-9b-v2", "--seq", "16", "--mixer-flops", "fused")
    assert "mixers: fused FLOPs, transformers states" in r.out.splitlines()[0]
    cfg = tmp_path / "mamba.json"
    cfg.write_text(json.dumps(MAMBA))
    r = cli("verify", "--config", str(cfg), "--seq", "5", "--mixer-flops", "fused")
    assert r.code == 0 and "mixers: fused FLOPs, transformers states" in r.out, r.out
    plain = json.loads(cli("trace", "--preset", "gpt2", "--seq", "8", "--json").out)["totals"]
    assert plain["state_cache_convention"] == plain["mixer_flops_convention"] == "none"


@pytest.mark.parametrize(("args", "key"), [
    (["--preset", "llama3-8b", "--mixer-flops", "fused"], "mixer_flops: applies to models with"),
    (["--preset", "gpt2", "--state-cache", "vllm"], "state_cache: applies to models with"),
    (["--preset", "nemotron-nano-9b-v2", "--state-dtype", "fp32"], "state_dtype: is vLLM's"),
    (["--preset", "nemotron-nano-9b-v2", "--mixer-flops", "fast"], "mixer_flops: 'fast' is not"),
    (["--preset", "qwen3-next-80b-a3b", "--mixer-flops", "fused", "--set", "scan_chunk=32"],
     "mixer_flops: fused: flash-linear-attention's"),
])
def test_a_flag_that_does_not_apply_is_refused_in_one_line(cli, args, key):
    r = cli("trace", *args)
    lines = r.err.strip().splitlines()
    assert r.code == 2 and len(lines) == 1 and "Traceback" not in r.err, r.err
    assert lines[0].startswith("error: " + key), lines[0]


@pytest.mark.slow  # fit and sweep of a 56-layer preset: ~4 s
def test_planning_takes_the_conventions(cli):
    # fit: each sequence's states at vLLM's size (K_c − 1 columns, bf16 state) leave more
    # sequences room than transformers' (K_c columns, fp32 state)
    fit = {c: json.loads(cli("fit", "--preset", "nemotron-nano-9b-v2", "--gpu", "H100-SXM",
                             "--seq", "2048", *a, "--json").out)
           for c, a in (("hf", []), ("vllm", ["--state-cache", "vllm"]))}
    assert fit["hf"]["memory_per_rank"]["state_cache"] == 144_211_968
    assert fit["vllm"]["memory_per_rank"]["state_cache"] == 72_769_536
    assert fit["vllm"]["max_batch"] > fit["hf"]["max_batch"]
    # sweep's closed form: the fused count, as trace gives it
    row = json.loads(cli("sweep", "nemotron-nano-9b-v2", "--seq", "100", "--mixer-flops",
                         "fused", "--format", "jsonl").out.splitlines()[0])
    trace = json.loads(cli("trace", "--preset", "nemotron-nano-9b-v2", "--seq", "100",
                           "--mixer-flops", "fused", "--json").out)["totals"]
    assert row["flops"] == trace["flops"] == 1_678_350_540_800
    r = cli("sweep", "qwen3-next-80b-a3b", "--seq", "100", "--mixer-flops", "fused")
    assert r.code == 2 and r.err.startswith("error: mixer_flops: fused: fla's triangular")


@pytest.mark.parametrize("fields", [MAMBA, GDN], ids=["mamba2", "gated_deltanet"])
@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_verify_passes_under_both_conventions(fields, phase):
    # the executor records the kernels' counts and vLLM's state from its arrays; verify compares
    # them with the symbolic ones (T=70: past one chunk of 64, the last one partial)
    wl = Workload(batch=2, seq=70, phase=phase, dtype="fp32", tp=2, mixer_flops="fused",
                  state_cache="vllm", state_dtype="bf16")
    r = verify(ModelConfig(**{**fields, "ssm_groups": 2} if "ssm_heads" in fields else fields),
               wl, precision="float64")
    bad = [c for c in r["checks"] if not c["ok"]]
    assert not bad, bad


def test_verify_against_refuses_the_conventions(cli):
    r = cli("verify", "--against", "transformers", "--preset", "nemotron-nano-9b-v2",
            "--mixer-flops", "fused")
    assert r.code == 2 and r.err.strip() == ("error: mixer_flops: verify --against does not "
                                             "take it: transformers runs its own torch path, "
                                             "the transformers-torch convention")
