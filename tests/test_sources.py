"""Presets, config files, Hugging Face config.json mapping and --set overrides.

Parameter counts here use their own formula (not the core's), checked against the totals that
Hugging Face publishes for each model.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shapecalc.costs.trace import build_trace
from shapecalc.inputs.hf import load_hf_config
from shapecalc.inputs.sources import (
    apply_overrides,
    hardware_dirs,
    list_presets,
    load_config_file,
    load_preset,
    presets_dirs,
    published,
)
from shapecalc.model.config import ModelConfig, ShapecalcError, Workload

HF = Path(__file__).parent / "data" / "hf"
PUBLISHED = json.loads((HF / "published.json").read_text())
PRESETS = sorted(list_presets())
REAL = {
    "gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl", "llama2-7b", "llama2-13b", "llama2-70b",
    "llama3-8b", "llama3-70b", "llama3.1-405b", "mistral-7b", "qwen2.5-0.5b", "qwen2.5-7b",
}  # fmt: skip


def _v4_params(m: ModelConfig) -> int:
    """DeepSeek-V4, written out from DeepseekV4Attention, its compressors and indexer,
    DeepseekV4SparseMoeBlock, DeepseekV4HyperConnection and DeepseekV4HyperHead.__init__."""
    d, h, dh, v, dq = m.d_model, m.n_heads, m.dh, m.vocab_size, m.q_lora_rank
    g, dg, n, e, w = m.o_groups, m.o_lora_rank, m.hc_streams, m.n_experts, m.dff_expert
    attn = d * dq + dq + dq * h * dh + d * dh + dh + h * dh * dg + g * dg * d + h
    hca = 2 * d * dh + m.compress_ratio_hca * dh + dh if m.compress_ratio_hca else 0
    c, hi, r = m.csa_index_head_dim, m.csa_index_heads, m.compress_ratio_csa
    csa = (2 * d * 2 * dh + r * 2 * dh + dh + 2 * d * 2 * c + r * 2 * c + c + dq * hi * c
           + d * hi) if r else 0
    moe = e * d + e * 3 * d * w + 3 * d * w
    hc = 2 * ((n + 2) * n * n * d + (n + 2) * n + 3)
    layer = attn + moe + hc + 2 * d
    extra = {"sliding": 0, "hca": hca, "csa": csa}
    total = sum(layer + extra[t] for t in m.layer_types)
    return total + 2 * v * d + d + n * n * d + n + 1


def _gemma4_params(m: ModelConfig) -> int:
    """Gemma 4, written out from Gemma4TextAttention, Gemma4TextMLP, Gemma4TextDecoderLayer and
    Gemma4TextModel.__init__: a global layer's own head width and KV heads, no v_proj with K=V
    there, no k/v (nor their norms) on a KV-sharing layer, whose MLP may be 2·Dff wide; the
    per-layer embeddings' table, projection and norm, and each layer's gate and projection."""
    d, h, v, dp, b = m.d_model, m.n_heads, m.vocab_size, m.ple_dim or 0, m.qkv_bias
    first_shared = m.n_layers - m.kv_shared_layers
    total = v * d + d + ((m.ple_vocab or 0) * m.n_layers * dp + d * m.n_layers * dp + dp
                         if dp else 0)
    for i, kind in enumerate(m.layer_types or ("full",) * m.n_layers):
        glob = kind == "full"
        dh = m.global_head_dim if glob else m.dh
        hkv = (m.global_kv_heads or m.kv_heads) if glob else m.kv_heads
        attn = (d + b) * h * dh + h * dh * d + d * m.attn_out_bias + dh  # q, o, q_norm
        if i < first_shared:  # k (and v unless K=V), k_norm
            attn += (1 + (not (glob and m.global_k_eq_v))) * (d + b) * hkv * dh + dh
        dff = m.d_ff * (2 if m.shared_ffn_wide and i >= first_shared else 1)
        total += attn + 3 * d * dff + 4 * d + (2 * d * dp + d if dp else 0)
    return total


def params(m: ModelConfig) -> int:
    """Total parameters, tied embeddings counted once."""
    if m.shared_kv:
        return _v4_params(m)
    if m.global_head_dim is not None:
        return _gemma4_params(m)
    d, h, hkv, dh, dff, v = m.d_model, m.n_heads, m.kv_heads, m.dh, m.d_ff, m.vocab_size
    norm = d * (2 if m.has_norm_bias else 1) * m.norm_weights  # nanochat's norms: none
    attn = d * h * dh + 2 * d * hkv * dh + h * dh * d
    attn += (h * dh + 2 * hkv * dh) * m.qkv_bias + d * m.attn_out_bias
    qk = 2 * dh if m.qk_norm_width == "head" else (h + hkv) * dh  # OLMo 2: the whole width
    attn += qk * m.qk_norm + h * m.attention_sinks  # q/k RMSNorm γ; one sink a head
    attn += (h + hkv) * dh * m.qk_norm_per_head  # q/k LayerNorm: a γ per head
    if m.kv_lora_rank is not None:  # MLA, written out from DeepseekV3Attention.__init__
        dq, dc, dr, dn, dv = (m.q_lora_rank, m.kv_lora_rank, m.qk_rope_head_dim,
                              m.qk_nope_head_dim, m.v_head_dim)
        q = d * h * (dn + dr) if dq is None else d * dq + dq + dq * h * (dn + dr)
        attn = q + d * (dc + dr) + dc + dc * h * (dn + dv) + h * dv * d
        attn += ((dq or 0) + dc + dr) * m.qkv_bias + d * m.attn_out_bias
        attn += h * m.attention_sinks  # HYV4Attention.sinks
    # the output gate [D, H·Dh] (+ q's bias: Qwen3-Next's is q_proj's second half; AFMoE's has
    # none); with MLA [D, H·D_v], unbiased (HYV4Attention.gate_proj)
    attn += (d * h * m.v_dim + h * dh * m.qkv_bias * (not m.mla)) * m.attn_output_gate
    attn += d * h * m.attn_head_gate  # g_proj [D → H], one gate a head (LFM3; Ling 3.0's MLA)
    mats = 3 if m.gated else 2
    ffn = mats * d * dff + (((mats - 1) * dff + d) if m.ffn_bias else 0)
    ffn += 2 * (m.ffn == "xielu")  # xIELU's α_p and α_n
    if "cca" in m.mixers:
        return _zaya_params(m)
    if "inkling" in m.mixers:
        return _inkling_params(m)
    if m.mixer_types is not None:  # a token mixer and a channel mixer per layer, each normed
        return _mixer_params(m, attn, ffn, norm)
    norms = 4 if m.norm_position == "sandwich" else 2  # Gemma 2/3: + the post-norms; OLMo 2: 2
    base = attn + (m.parallel_norms if m.parallel_block else norms) * norm
    total = v * d + norm + norm * m.embedding_norm  # final norm; BLOOM's embedding norm
    if m.hc_streams is not None:  # HYV4HyperConnection ×2 a layer: fn [2n, n·D], base, scale [2];
        n = m.hc_streams  # HYV4HyperHead: hc_fn [n, n·D], hc_base [n], hc_scale [1]
        base += 2 * (2 * n * n * d + 2 * n + 2)
        total += n * n * d + n + 1
    if m.index_topk:  # DeepseekV32Indexer: wq_b [q_lora → H_I·D_I], wk [D → D_I], k_norm (γ, β),
        # weights_proj [D → H_I]; a layer reusing another's top-k (GLM-5) has none
        hi, di = m.index_heads, m.index_head_dim
        shared = set(m.index_shared_layers or ())
        slid = {i for i, t in enumerate(m.layer_types or ()) if t == "sliding"}  # dots3's
        total += sum(m.q_lora_rank * hi * di + d * di + 2 * di + d * hi
                     for i in range(m.n_layers) if i not in shared | slid)
    if m.block_sparse:  # MiniMaxM3VLIndexer: q [D → H_I·D_I], k [D → D_I], q/k norms of D_I
        hi, di = m.block_index_heads, m.block_index_head_dim
        total += len(m.block_indexer_layers) * (d * (hi * di + di) + 2 * di)
    own = m.kv_heads_sliding is not None or (m.v_head_dim is not None and not m.mla)
    for i, kind in enumerate(m.ffn_types or (("moe" if m.n_experts else "dense",) * m.n_layers)):
        if own:  # MiMo-V2-Flash: the layer's own attention in place of the uniform one
            total += _own_attention(m, i) - attn
        if m.layer_widths is not None and m.mla:  # dots3: the layer's MLA at its own widths
            total += _widths_attention(m, i) - attn
        if kind == "dense":
            total += base + ffn
            continue
        # MoE: router (+bias), E experts of width Dff_e (+biases), shared experts and their gate
        E, de = m.n_experts, m.dff_expert
        expert = mats * d * de + (((mats - 1) * de + d) if m.expert_bias else 0)
        sw = m.n_shared_experts * m.dff_shared
        shared = mats * d * sw + (((mats - 1) * sw + d) if m.ffn_bias and sw else 0)
        total += (base + d * E + E * (m.router_bias + m.routing_bias) + E * expert + shared
                  + d * m.shared_expert_gate)  # routing_bias: AFMoE's expert_bias of E
    heads = m.layer_widths.n_heads if m.layer_widths is not None and not m.mla else None
    if heads is not None:  # Laguna: a layer's own H_ℓ, each head its q and o rows, gate
        per_head = (2 * d * dh + dh * m.qkv_bias + d * m.attn_head_gate
                    + (d * dh + dh * m.qkv_bias) * m.attn_output_gate + m.attention_sinks
                    + dh * m.qk_norm_per_head + dh * m.qk_norm * (m.qk_norm_width == "all"))
        total += per_head * sum(x - h for x in heads)
    total += 0 if m.tie_embeddings else v * d
    total += v * m.lm_head_bias
    if m.positions == "learned":
        total += m.max_positions * d
    return total


def _widths_attention(m: ModelConfig, i: int) -> int:
    """Layer i's MLA at its own widths, written from Dots3NoteAttention: q_a [D, D_q] and its
    norm, q_b [D_q, H·(D_n + D_r)], kv_a [D, D_c + D_r], the latent's and k_rope's norms, kv_b
    [D_c, H·(D_n + D_v)], o [H·D_v, D], the head gate g_proj [D, H]."""
    def at(f: str) -> int:
        v = getattr(m.layer_widths, f)
        return getattr(m, f) if v is None else v[i]
    d = m.d_model
    h, dq, dc, dn, dr, dv = (at(f) for f in ("n_heads", "q_lora_rank", "kv_lora_rank",
                                              "qk_nope_head_dim", "qk_rope_head_dim",
                                              "v_head_dim"))
    return (d * dq + dq + dq * h * (dn + dr) + d * (dc + dr) + dc + dr * m.mla_rope_norm
            + dc * h * (dn + dv) + h * dv * d + d * h * m.attn_head_gate + h * m.attention_sinks)


def _own_attention(m: ModelConfig, i: int) -> int:
    """Layer i's attention, written from MiMoV2FlashAttention: q [D, H·Dh], k [D, H_kv·Dh] and v
    [D, H_kv·D_v] with a sliding layer's own H_kv (2·H_kv), o [H·D_v, D], a sink a head on the
    sliding layers only."""
    d, h, dh, dv, b = m.d_model, m.n_heads, m.dh, m.v_dim, m.qkv_bias
    sliding = (m.layer_types[i] == "sliding" if m.layer_types
               else m.sliding_window is not None)
    kv = m.kv_heads_sliding if sliding and m.kv_heads_sliding is not None else m.kv_heads
    sinks = m.attention_sinks and (sliding or not m.sinks_sliding_only)
    return ((d + b) * (h * dh + kv * dh + kv * dv) + h * dv * d + d * m.attn_out_bias
            + h * sinks)


def _mixer_params(m: ModelConfig, attn: int, ffn: int, norm: int) -> int:
    """Layer by layer, written from NemotronHMamba2Mixer's and Qwen3NextGatedDeltaNet's
    __init__: in_proj, conv1d, dt_bias, A_log (and Mamba-2's D), the gated norm, out_proj."""
    d, v = m.d_model, m.vocab_size
    hs, ds, g, ns, kc = m.ssm_heads, m.ssm_head_dim, m.ssm_groups, m.ssm_state, m.conv_kernel
    mamba = gdn = kda = 0
    if hs is not None:
        inner, conv = hs * ds, hs * ds + 2 * g * ns
        mamba = (d * (inner + conv + hs) + conv * kc + conv * m.conv_bias + 3 * hs + inner
                 + inner * d)
    if m.gdn_qk_heads is not None:
        kd, vd = m.gdn_qk_heads * m.gdn_qk_dim, m.gdn_v_heads * m.gdn_v_dim
        gdn = (d * (2 * kd + 2 * vd) + d * 2 * m.gdn_v_heads + (2 * kd + vd) * kc
               + 2 * m.gdn_v_heads + m.gdn_v_dim + vd * d)
    if m.gdn_qk_heads is not None:  # KimiLinearDeltaAttention: q, k, v, the low-rank forget and
        # output gates (D → D_k → H·D_k; Ling 3.0's one [D → H·D_k] each), b_proj, o_proj;
        # conv1d, dt_bias (per channel), A_log, o_norm's γ of D_k
        h, dk = m.gdn_qk_heads, m.gdn_qk_dim
        kd = h * dk
        gates = 2 * ((d * dk + dk * kd) if m.kda_low_rank else d * kd)
        kda = (3 * d * kd + gates + d * h + kd * d + 3 * kd * kc + kd + h + dk)
    # Lfm2ShortConv: in_proj [D → 3D], the depthwise conv [D, K_c], out_proj, each biased or not
    conv = (3 * d * d + d * (kc or 0) + d * d + 5 * d * m.conv_bias) if "short_conv" in m.mixers \
        else 0
    m1 = 0
    if m.mamba_expand is not None:  # JambaMambaMixer: in, conv, x_proj, dt_proj, A_log, D, out
        i, r, b = m.mamba_inner, m.mamba_dt_rank, m.mamba_proj_bias
        m1 = (d * 2 * i + 2 * i * b + i * kc + i * m.conv_bias + i * (r + 2 * ns) + r * i + i
              + i * ns + i + i * d + d * b + (r + 2 * ns) * m.mamba_bcdt_norm)
    mamba -= 0 if m.ssm_gated_norm else (hs or 0) * (ds or 0)  # Falcon-H1: no gated norm
    token = {"attention": attn, "mamba2": mamba, "gated_deltanet": gdn, "short_conv": conv,
             "none": -norm, "mamba1": m1, "parallel": attn + mamba,  # FalconH1DecoderLayer: both
             "kda": kda}
    sw = m.n_shared_experts * m.dff_shared
    moe = (d * (m.n_experts or 0) + (m.n_experts or 0) * 3 * d * m.dff_expert + 3 * d * sw
           + d * m.shared_expert_gate)
    total = v * d + norm + (0 if m.tie_embeddings else v * d)
    kinds = m.ffn_types or ("moe" if m.n_experts else "dense",) * m.n_layers
    post = norm if m.norm_position == "sandwich" else 0  # LFM3: each branch's output normed
    for mixer, kind in zip(m.mixers, kinds, strict=True):
        total += token[mixer] + norm + post + {"dense": ffn + norm + post, "moe": moe + norm,
                                               "none": 0}[kind]
    return total


def _inkling_params(m: ModelConfig) -> int:
    """Written from InklingForCausalLM's __init__: per layer InklingAttention (q, k, v, r and o
    projections, the heads of its layer type: layer_widths' lists where given; k_sconv and
    v_sconv, no bias; q_norm, k_norm; the rel_logits_proj profiles [d_rel, rel_extent], a
    sliding layer's [d_rel, W]), two RMSNorms, attn_sconv and mlp_sconv, and InklingMLP
    (× global_scale) or InklingMoE (the router over E + n_s and its global_scale, the experts,
    the shared experts); embed_tokens with its embed_norm, the final norm, an untied lm_head."""
    d, v, k, w = m.d_model, m.vocab_size, m.conv_kernel, m.layer_widths
    total = 2 * v * d + 2 * d
    for i, kind in enumerate(m.ffn_types):
        h, hkv, dh = ((getattr(w, f) or (dflt,) * m.n_layers)[i] if w else dflt
                      for f, dflt in (("n_heads", m.n_heads), ("n_kv_heads", m.kv_heads),
                                      ("head_dim", m.dh)))
        x = m.sliding_window if m.layer_types[i] == "sliding" else m.rel_extent
        total += (d * h * dh + 2 * d * hkv * dh + d * h * m.rel_dim + h * dh * d
                  + 2 * hkv * dh * k + 2 * dh + m.rel_dim * x) + 2 * d + 2 * d * k
        e, ns, de = m.n_experts, m.n_shared_experts, m.dff_expert
        total += 3 * d * m.d_ff + 1 if kind == "dense" else (
            (e + ns) * d + 1 + e * 3 * d * de + ns * 3 * d * de)
    return total


def _zaya_params(m: ModelConfig) -> int:
    """Written from ZayaModel's __init__: per layer ZayaCCAProjection (q_proj, k_proj, the two
    value halves, conv_qk_depthwise and conv_qk_grouped with their biases), ZayaQKNorm's temp,
    o_proj, two RMSNorms, two ZayaResidualScalings, ZayaRouter (down_proj, router_states_scale
    from layer 1, ZayaRouterMLP: norm, fc1, fc2, out_proj to E + 1) and ZayaExperts; the
    embeddings' scale and bias, the final norm."""
    d, h, hkv, dh, v, e = m.d_model, m.n_heads, m.kv_heads, m.dh, m.vocab_size, m.n_experts
    c, r, b = (h + hkv) * dh, m.router_hidden, m.qkv_bias
    attn = (d * h * dh + 2 * d * hkv * dh + h * dh * d + (h * dh + 2 * hkv * dh + d) * b
            + c * m.cca_time0 + c + c * dh * m.cca_time1 + c + hkv)
    router = d * r + r + r + 2 * (r * r + r) + r * (e + 1)
    layer = attn + 2 * d + 8 * d + router + e * 3 * d * m.dff_expert
    return (v * d + 2 * d + d + m.n_layers * layer + r * (m.n_layers - 1)
            + (0 if m.tie_embeddings else v * d) + v * m.lm_head_bias)


def raises(field: str, fn, *args) -> ShapecalcError:
    with pytest.raises(ShapecalcError) as info:
        fn(*args)
    assert info.value.field == field, str(info.value)
    assert "\n" not in str(info.value)
    return info.value


def write_hf(tmp_path: Path, cfg: dict, name: str = "config.json") -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(cfg))
    return p


def hf(stem: str) -> dict:
    return json.loads((HF / f"{stem}.json").read_text())


# ── presets ──────────────────────────────────────────────────────────────────────────────────────


def test_builtin_presets_present():
    assert REAL | {"seed-tiny", "seed-classroom"} <= set(PRESETS)


@pytest.mark.parametrize("name", PRESETS)
def test_preset_loads_and_count_matches_published(name):
    m = load_preset(name)
    assert m.name == name
    pub = published(name)
    assert isinstance(pub["source"], str) and pub["source"]
    assert params(m) == pub["params"]


def test_seed_shapes():
    tiny = load_preset("seed-tiny")
    assert (tiny.d_model, tiny.n_heads, tiny.dh, tiny.d_ff, tiny.vocab_size) == (8, 2, 4, 32, 10000)
    assert (tiny.ffn, tiny.positions, tiny.gated) == ("gelu", "none", False)
    room = load_preset("seed-classroom")
    assert (room.d_model, room.n_heads, room.dh, room.d_ff) == (8, 2, 4, 16)
    assert (room.ffn, room.norm, room.positions) == ("swiglu", "rmsnorm", "rope")


def test_preset_dirs_order_and_shadowing(tmp_path, monkeypatch):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    body = 'd_model = 4\nn_layers = 1\nn_heads = 2\nd_ff = 8\npositions = "none"\n'
    (a / "gpt2.toml").write_text("vocab_size = 10\n" + body)
    (b / "gpt2.toml").write_text("vocab_size = 20\n" + body)
    (b / "mine.toml").write_text("vocab_size = 30\n" + body)
    monkeypatch.setenv("SHAPECALC_PRESETS", str(b))
    dirs = presets_dirs([a])
    assert dirs[:2] == [a, b] and dirs[-1].parts[-2:] == ("presets", "models")
    assert load_preset("gpt2", [a]).vocab_size == 10  # --presets-dir beats the env var
    assert load_preset("gpt2").vocab_size == 20  # the env var beats the built-in
    assert load_preset("mine").vocab_size == 30
    assert "llama2-7b" in list_presets([a])  # built-ins still listed
    monkeypatch.delenv("SHAPECALC_PRESETS")
    assert load_preset("gpt2").vocab_size == 50257
    assert hardware_dirs()[-1].parts[-2:] == ("presets", "hardware")


def test_unknown_preset():
    err = raises("preset", load_preset, "gpt5")
    assert "'gpt5'" in err.reason and "llama2-7b" in err.reason


def test_missing_presets_dir(tmp_path):
    raises("presets-dir", list_presets, [tmp_path / "nope"])


# ── config files ─────────────────────────────────────────────────────────────────────────────────

GOOD = 'vocab_size = 100\nd_model = 8\nn_layers = 2\nn_heads = 2\nd_ff = 16\npositions = "none"\n'


def test_toml_config_with_workload_and_published(tmp_path):
    p = tmp_path / "mine.toml"
    p.write_text(GOOD + '[published]\nparams = 5\nsource = "x"\n[workload]\nbatch = 4\nseq = 16\n')
    m, wl = load_config_file(p)
    assert (m.name, m.d_model, m.n_layers) == ("mine", 8, 2)
    assert wl == {"batch": 4, "seq": 16}
    assert published(p) == {"params": 5, "source": "x"}


def test_json_config_and_unknown_suffix(tmp_path):
    fields = {"vocab_size": 100, "d_model": 8, "n_layers": 2, "n_heads": 2, "d_ff": 16}
    fields["positions"] = "none"
    p = tmp_path / "m.json"
    p.write_text(json.dumps({**fields, "name": "named", "workload": {"seq": 8}}))
    m, wl = load_config_file(p)
    assert m.name == "named" and wl == {"seq": 8}
    q = tmp_path / "m.cfg"
    q.write_text(json.dumps(fields))
    assert load_config_file(q)[0].d_model == 8
    r = tmp_path / "m.conf"
    r.write_text(GOOD)
    assert load_config_file(r)[0].d_model == 8
    s = tmp_path / "bad.conf"
    s.write_text("{{{")
    assert "neither valid TOML" in raises("config", load_config_file, s).reason


def test_config_errors(tmp_path):
    err = raises("config", load_config_file, tmp_path / "missing.toml")
    assert err.reason.startswith("file not found: ")
    bad = tmp_path / "bad.toml"
    bad.write_text("d_model = = 3\n")
    assert "is not valid TOML: " in raises("config", load_config_file, bad).reason
    badj = tmp_path / "bad.json"
    badj.write_text('{"d_model": }')
    assert "is not valid JSON: " in raises("config", load_config_file, badj).reason
    lst = tmp_path / "list.json"
    lst.write_text("[1, 2]")
    raises("config", load_config_file, lst)
    unknown = tmp_path / "u.toml"
    unknown.write_text(GOOD + "foo = 1\n")
    assert raises("foo", load_config_file, unknown).reason == "unknown field"
    heads = tmp_path / "h.toml"
    heads.write_text(GOOD.replace("n_heads = 2", "n_heads = 3"))
    raises("n_heads", load_config_file, heads)
    missing = tmp_path / "m.toml"
    missing.write_text(GOOD.replace("d_model = 8\n", ""))
    raises("d_model", load_config_file, missing)
    literal = tmp_path / "l.toml"
    literal.write_text(GOOD + 'ffn = "swish"\n')
    raises("ffn", load_config_file, literal)
    pub = tmp_path / "p.toml"
    pub.write_text(GOOD + '[published]\nparams = "many"\n')
    raises("published.params", load_config_file, pub)
    wl = tmp_path / "w.toml"
    wl.write_text("workload = 3\n" + GOOD)
    raises("workload", load_config_file, wl)


def test_hf_config_given_as_model_file():
    err = raises("config", load_config_file, HF / "llama2-7b.json")
    assert "use --hf-config" in err.reason


# ── Hugging Face config.json ─────────────────────────────────────────────────────────────────────


@pytest.mark.parametrize("stem", sorted(PUBLISHED))
def test_hf_count_matches_published(stem):
    assert params(load_hf_config(HF / f"{stem}.json")) == PUBLISHED[stem]


@pytest.mark.parametrize("stem", sorted(REAL))
def test_hf_matches_preset(stem):
    got, want = load_hf_config(HF / f"{stem}.json"), load_preset(stem)
    for attr in got.model_dump(exclude={"name"}):  # every field, each named on failure
        assert getattr(got, attr) == getattr(want, attr), attr
    assert got.model_dump(exclude={"name"}) == want.model_dump(exclude={"name"})
    assert PUBLISHED[stem] == published(stem)["params"]


def attrs(m: ModelConfig, names: str) -> tuple:
    return tuple(getattr(m, n) for n in names.split())


def test_hf_specific_mappings():
    g = load_hf_config(HF / "gpt2.json")
    assert attrs(g, "fused_qkv positions max_positions") == (True, "learned", 1024)
    assert g.has_norm_bias
    f = load_hf_config(HF / "falcon-7b.json")
    assert attrs(f, "kv_heads dh parallel_block positions d_ff") == (1, 64, True, "rope", 18176)
    assert attrs(f, "tie_embeddings qkv_bias norm") == (True, False, "layernorm")
    o = load_hf_config(HF / "opt-125m.json")
    assert attrs(o, "max_positions ffn qkv_bias ffn_bias") == (2050, "relu", True, True)
    e = load_hf_config(HF / "gemma-2b.json")
    assert attrs(e, "dh kv_heads ffn embedding_scale") == (256, 1, "geglu", True)
    assert e.tie_embeddings
    p = load_hf_config(HF / "phi3-mini-4k.json")
    assert attrs(p, "fused_qkv sliding_window ffn tie_embeddings") == (True, 2047, "swiglu", False)
    q = load_hf_config(HF / "qwen2.5-0.5b.json")
    assert attrs(q, "qkv_bias attn_out_bias sliding_window") == (True, False, None)
    assert q.tie_embeddings
    assert load_hf_config(HF / "mistral-7b.json").sliding_window == 4096


def test_hf_defaults_follow_transformers(tmp_path):
    base = hf("mistral-7b")
    del base["num_key_value_heads"], base["sliding_window"], base["tie_word_embeddings"]
    m = load_hf_config(write_hf(tmp_path, base))
    assert (m.kv_heads, m.sliding_window, m.tie_embeddings) == (8, 4096, False)  # MistralConfig
    base["num_key_value_heads"] = None
    base["sliding_window"] = None
    m = load_hf_config(write_hf(tmp_path, base))
    assert (m.kv_heads, m.sliding_window) == (32, None)
    ll = hf("llama3-8b")
    ll.update(attention_bias=True, mlp_bias=True, head_dim=64, hidden_act="gelu")
    del ll["num_key_value_heads"]
    m = load_hf_config(write_hf(tmp_path, ll))
    assert (m.qkv_bias, m.attn_out_bias, m.ffn_bias, m.dh, m.kv_heads) == (True, True, True, 64, 32)
    assert m.ffn == "geglu"
    g = hf("gpt2")
    g["n_inner"] = 1000
    assert load_hf_config(write_hf(tmp_path, g)).d_ff == 1000


def test_hf_folder_and_name(tmp_path):
    folder = tmp_path / "my-model"
    folder.mkdir()
    write_hf(folder, hf("gpt2"))
    m = load_hf_config(folder)
    assert m.name == "my-model" and m.d_model == 768


def test_qwen2_sliding_window(tmp_path):
    q = hf("qwen2.5-7b")
    q.update(use_sliding_window=True, sliding_window=4096, max_window_layers=0)
    assert load_hf_config(write_hf(tmp_path, q)).sliding_window == 4096
    q["max_window_layers"] = 28  # no layer at or past 28: nothing slides
    assert load_hf_config(write_hf(tmp_path, q)).sliding_window is None
    q["max_window_layers"] = 14  # layers 14..27 slide, 0..13 attend to everything
    m = load_hf_config(write_hf(tmp_path, q))
    assert m.layer_types == ("full",) * 14 + ("sliding",) * 14 and m.sliding_window == 4096
    # the cache sums the kinds: 14 layers of T tokens and 14 of min(T, W), K and V of
    # H_kv=4 heads of Dh=128 in bf16
    t = build_trace(m, Workload(batch=1, seq=8192))["totals"]
    assert t["kv_cache_bytes"] == (14 * 8192 + 14 * 4096) * 2 * 4 * 128 * 2


def test_falcon_variants(tmp_path):
    f = hf("falcon-7b")
    raises("alibi", load_hf_config, write_hf(tmp_path, {**f, "alibi": True}))
    big = {**f, "new_decoder_architecture": True, "num_kv_heads": 8, "num_attention_heads": 128,
           "hidden_size": 8192}  # fmt: skip
    two = load_hf_config(write_hf(tmp_path, big))  # ln_attn and ln_mlp
    assert (two.kv_heads, two.parallel_block, two.parallel_norms) == (8, True, 2)
    one_norm = load_hf_config(write_hf(tmp_path, {**big, "num_ln_in_parallel_attn": 1}))
    assert (one_norm.kv_heads, one_norm.parallel_block, one_norm.parallel_norms) == (8, True, 1)
    raises("num_ln_in_parallel_attn", load_hf_config,
           write_hf(tmp_path, {**f, "num_ln_in_parallel_attn": 2}))
    seq = load_hf_config(write_hf(tmp_path, {**f, "parallel_attn": False, "multi_query": False}))
    assert (seq.parallel_block, seq.kv_heads) == (False, 71)
    assert params(seq) > PUBLISHED["falcon-7b"]


def test_opt_variants(tmp_path):
    o = hf("opt-125m")
    err = raises(
        "word_embed_proj_dim", load_hf_config, write_hf(tmp_path, {**o, "word_embed_proj_dim": 512})
    )
    assert "512" in err.reason
    post = load_hf_config(write_hf(tmp_path, {**o, "do_layer_norm_before": False}))
    assert post.norm_position == "post"
    nobias = load_hf_config(write_hf(tmp_path, {**o, "enable_bias": False}))
    assert (nobias.qkv_bias, nobias.attn_out_bias, nobias.ffn_bias) == (False, False, False)


def test_hf_errors(tmp_path):
    err = raises("model_type", load_hf_config, write_hf(tmp_path, {"model_type": "bert"}))
    assert "'bert' is not supported; supported: " in err.reason and "llama" in err.reason
    raises("model_type", load_hf_config,
           write_hf(tmp_path, {**hf("gemma-7b"), "model_type": "gemma3n"}))
    raises("model_type", load_hf_config, write_hf(tmp_path, {"hidden_size": 8}))
    cfg = hf("llama2-7b")
    del cfg["hidden_size"]
    err = raises("hidden_size", load_hf_config, write_hf(tmp_path, cfg))
    assert err.reason == "missing from config.json (needed for D)"
    g = hf("gpt2")
    del g["n_layer"]
    raises("n_layer", load_hf_config, write_hf(tmp_path, g))
    raises("hf-config", load_hf_config, tmp_path / "none.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    assert "is not valid JSON" in raises("hf-config", load_hf_config, bad).reason
    relu = {**hf("llama2-7b"), "hidden_act": "relu"}
    raises("hidden_act", load_hf_config, write_hf(tmp_path, relu))
    raises(
        "n_heads", load_hf_config, write_hf(tmp_path, {**hf("llama2-7b"), "num_attention_heads": 3})
    )


# ── --set ────────────────────────────────────────────────────────────────────────────────────────


def test_apply_overrides():
    m = load_preset("llama2-7b")
    out = apply_overrides(m, ["n_layers=2", "tie_embeddings=true", "ffn=geglu", "sliding_window=8"])
    assert attrs(out, "n_layers tie_embeddings ffn sliding_window") == (2, True, "geglu", 8)
    assert apply_overrides(out, ["sliding_window=null"]).sliding_window is None
    assert apply_overrides(m, ["name=123"]).name == "123"
    assert apply_overrides(m, ['ffn="relu"', " n_kv_heads = 8 "]).kv_heads == 8
    assert apply_overrides(m, []) == m


def test_apply_overrides_errors():
    m = load_preset("llama2-7b")
    assert raises("set", apply_overrides, m, ["foo=1"]).reason == "unknown field 'foo'"
    err = raises("set", apply_overrides, m, ["n_layers"])
    assert err.reason == "expected field=value, got 'n_layers'"
    raises("n_heads", apply_overrides, m, ["n_heads=3"])
    raises("ffn", apply_overrides, m, ["ffn=swish"])
    raises("d_model", apply_overrides, m, ["d_model=-1"])
