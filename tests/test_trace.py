"""The core: stage shapes, the seeds' formulas, the §11 (TP communication) ledger, exact totals,
and the contract."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from shapecalc.costs.schemas import TraceOut
from shapecalc.costs.trace import build_trace
from shapecalc.inputs import sources
from shapecalc.interpret.symbolic import stages
from shapecalc.model.config import ModelConfig, Workload, nbytes
from shapecalc.model.parallel import pp_layers
from shapecalc.model.quant import source_fields

# The first seed's §13 (one set of sizes through the whole pass): B=2, T=4, D=8, H=2, Dh=4,
# Dff=32, N_vocab=10000, stage by stage in order.
SEED_13 = [
    ("token ids", [2, 4]),
    ("embedding", [2, 4, 8]),
    ("q projection", [2, 4, 8]),
    ("k projection", [2, 4, 8]),
    ("v projection", [2, 4, 8]),
    ("q: transpose", [2, 2, 4, 4]),
    ("k: transpose", [2, 2, 4, 4]),
    ("v: transpose", [2, 2, 4, 4]),
    ("QKᵀ", [2, 2, 4, 4]),
    ("scale", [2, 2, 4, 4]),
    ("causal mask", [2, 2, 4, 4]),
    ("softmax", [2, 2, 4, 4]),
    ("A·V", [2, 2, 4, 4]),
    ("merge heads: reshape", [2, 4, 8]),
    ("output projection WO", [2, 4, 8]),
    ("residual", [2, 4, 8]),
    ("FFN up", [2, 4, 32]),
    ("FFN down", [2, 4, 8]),
    ("residual", [2, 4, 8]),
    ("lm head", [2, 4, 10000]),
    ("last position", [2, 10000]),
]


def _in_order(listing: list[tuple[str, list[int]]], wanted: list[tuple[str, list[int]]]) -> bool:
    it = iter(listing)
    return all(any(x == w for x in it) for w in wanted)


def test_seed_tiny_stages_follow_section_13():
    m = sources.load_preset("seed-tiny")
    got = [(s.name, s.shape) for s in stages(m, Workload(batch=2, seq=4))]
    assert _in_order(got, SEED_13)
    qkt = next(s for s in stages(m, Workload(batch=2, seq=4)) if s.name == "QKᵀ")
    assert qkt.dims == ["B", "H", "T", "T"] and qkt.flops_formula == "2·B·H·T²·Dh"


def test_trace_without_arguments_shows_section_13_in_order(cli):
    r = cli("trace")
    assert r.code == 0, r.err
    pos = 0
    for name, shape in SEED_13:
        text = "[" + ",".join(str(x) for x in shape) + "]"
        i = r.out.find(name, pos)
        assert i >= 0, name
        j = r.out.find(text, i)
        assert j >= 0 and r.out[i:j].count("\n") == 0, (name, text)
        pos = j
    assert "× N = 1 layer" in r.out and "totals" in r.out


# the second seed's §11 (the TP communication ledger): hidden 8192, TP 4, batch 1, seq 2048, fp16
LEDGER = ("trace", "--preset", "llama2-70b", "--tp", "4", "--batch", "1", "--seq", "2048",
          "--dtype", "fp16", "--json")


def test_llama2_70b_tp4_ledger(cli):
    r = cli(*LEDGER)
    assert r.code == 0, r.err
    doc = r.json()
    tp = doc["parallel"]["tp"]
    assert tp["allreduce_bytes"] == 33_554_432  # 32 MiB
    assert tp["allreduce_bytes_per_layer"] == 67_108_864  # 64 MiB
    assert tp["allreduce_bytes_total"] == 5_368_709_120  # 5 GiB over 80 layers
    assert tp["ring_bytes_per_rank_total"] * 2 == tp["allreduce_bytes_total"] * 3  # 1.5×
    assert doc["totals"]["kv_cache_bytes"] == 671_088_640
    assert tp["kv_cache_bytes_per_rank"] == 167_772_160
    assert doc["totals"]["params"] == 68_976_648_192
    r2 = cli(*LEDGER, "--pp", "2")
    assert r2.json()["parallel"]["pp"]["boundary_bytes"] == 33_554_432


def test_json_is_one_document_with_stable_keys_and_schema(cli):
    r = cli("trace", "--preset", "gpt2", "--seq", "512", "--json")
    doc = r.json()
    assert list(doc) == ["model", "workload", "layers", "stages", "totals", "parallel", "widths"]
    for key in (
        "params",
        "flops",
        "elementwise_flops",
        "weight_bytes",
        "kv_cache_bytes",
        "kv_cache_blocks",
    ):
        assert isinstance(doc["totals"][key], int)
    TraceOut.model_validate(doc)
    assert "\x1b[" not in r.out and r.err == ""


def test_every_preset_has_its_published_parameter_count():
    for name in sources.list_presets():
        want = sources.published(name)["params"]
        m = sources.load_preset(name)
        got = build_trace(m, Workload(batch=1, seq=1, **source_fields(m, {})))["totals"]["params"]
        assert got == want, name


def test_presets_commands(cli):
    r = cli("presets")
    assert r.code == 0 and "llama3.1-405b" in r.out and "405,853,388,800" in r.out
    r = cli("presets", "show", "mistral-7b", "--json")
    assert r.json()["sliding_window"] == 4096


def test_schema_command(cli):
    r = cli("schema", "--all")
    assert {"config", "workload", "trace"} <= set(r.json())
    assert cli("schema", "nope").code == 2


# -- the seeds' hand formulas on random configs --------------------------------------------------
@st.composite
def configs(draw):
    H = draw(st.integers(1, 8))
    Dh = draw(st.sampled_from([2, 4, 6, 8, 16]))
    D = H * Dh
    groups = draw(st.sampled_from([g for g in range(1, H + 1) if H % g == 0]))
    ffn = draw(st.sampled_from(["gelu", "relu", "swiglu", "geglu"]))
    return ModelConfig(
        vocab_size=draw(st.integers(2, 5000)),
        d_model=D,
        n_layers=draw(st.integers(1, 6)),
        n_heads=H,
        n_kv_heads=H // groups,
        d_ff=draw(st.integers(1, 64)) * 4,
        ffn=ffn,
        norm=draw(st.sampled_from(["layernorm", "rmsnorm"])),
        norm_position=draw(st.sampled_from(["pre", "post"])),
        positions=draw(st.sampled_from(["rope", "none", "sinusoidal", "learned"])),
        max_positions=4096,
        tie_embeddings=draw(st.booleans()),
        fused_qkv=draw(st.booleans()),
    )


workloads = st.builds(
    Workload,
    batch=st.integers(1, 9),
    seq=st.integers(1, 300),
    phase=st.sampled_from(["prefill", "decode"]),
    dtype=st.sampled_from(["fp32", "bf16", "fp8", "int4"]),
)


@settings(max_examples=60, deadline=None)
@given(configs(), workloads)
def test_seed_formulas_hold(m, wl):
    doc = build_trace(m, wl)
    D, H, Hkv, Dh, Dff, N = m.d_model, m.n_heads, m.kv_heads, m.dh, m.d_ff, m.n_layers
    B, T = wl.batch, wl.seq
    by = {s["name"]: s for s in doc["stages"]}
    pb = doc["totals"]["params_breakdown"]
    if Hkv == H:  # 4D² for MHA without biases
        assert pb["attention_per_layer"] == 4 * D * D
    matrices = 3 if m.gated else 2
    assert pb["ffn_per_layer"] == matrices * D * Dff  # 2D·Dff for the basic FFN
    Tq = T if wl.phase == "prefill" else 1
    Tk = T if wl.phase == "prefill" else T + 1
    assert by["QKᵀ"]["flops"] == 2 * (B * H * Tq * Tk * Dh)  # B·H·T²·Dh multiply-adds
    assert by["A·V"]["flops"] == 2 * (B * H * Tq * Tk * Dh)
    assert by["FFN up"]["flops"] == 2 * (B * Tq * D * Dff)  # B·T·D·Dff multiply-adds
    kv_elems = 2 * N * B * Hkv * Tk * Dh  # 2·N·B·H·T·Dh (H_kv heads with GQA)
    assert doc["totals"]["kv_cache_bytes"] == N * nbytes(kv_elems // N, wl.kv)
    # totals are the stage sums
    assert doc["totals"]["flops"] == sum(s["flops"] * s["repeat"] for s in doc["stages"])
    lm_rows = B * Tq
    assert by["lm head"]["flops"] == 2 * lm_rows * D * m.vocab_size
    TraceOut.model_validate(doc)


@settings(max_examples=40, deadline=None)
@given(configs(), workloads, st.sampled_from([2, 4]))
def test_tensor_parallel_ledger(m, wl, p):
    if (
        m.n_heads % p
        or m.d_ff % p
        or (m.kv_heads >= p and m.kv_heads % p)
        or (m.kv_heads < p and p % m.kv_heads)
    ):
        return
    wl = wl.model_copy(update={"tp": p})
    doc = build_trace(m, wl)
    tp = doc["parallel"]["tp"]
    Tq = wl.seq if wl.phase == "prefill" else 1
    one = nbytes(wl.batch * Tq * m.d_model, wl.act)
    assert tp["allreduce_bytes"] == one
    assert tp["allreduce_per_layer"] == 2
    assert tp["allreduce_bytes_total"] == 2 * one * m.n_layers
    assert tp["ring_bytes_per_rank"] == 2 * (p - 1) * -(-one // p)
    assert tp["kv_cache_bytes_per_rank"] * min(p, m.kv_heads) == doc["totals"]["kv_cache_bytes"]
    if m.kv_heads >= p and m.vocab_size % p == 0:
        assert tp["flops_per_rank"] * p == doc["totals"]["flops"]


def test_huge_sizes_are_exact_integers():
    m = sources.load_preset("llama3.1-405b")
    wl = Workload(batch=10**8, seq=131072, dtype="bf16")
    doc = build_trace(m, wl)
    B, T, D, H, Hkv, Dh, Dff, V, N = (10**8, 131072, 16384, 128, 8, 128, 53248, 128256, 126)
    per_layer = 2 * B * T * D * (H * Dh + 2 * Hkv * Dh + H * Dh + 3 * Dff) + 4 * B * H * T * T * Dh
    assert doc["totals"]["flops"] == N * per_layer + 2 * B * T * D * V
    assert doc["totals"]["flops"] > 2**63
    assert doc["totals"]["kv_cache_bytes"] == 2 * N * B * Hkv * T * Dh * 2


def test_decode_reads_cache_plus_one_and_sliding_window():
    m = sources.load_preset("mistral-7b")
    d = build_trace(m, Workload(seq=100, phase="decode"))
    by = {s["name"]: s for s in d["stages"]}
    assert by["QKᵀ"]["dims"] == ["B", "H", "1", "T′"] and by["QKᵀ"]["shape"][-1] == 101
    d = build_trace(m, Workload(seq=10_000, phase="decode"))
    assert {s["name"]: s for s in d["stages"]}["QKᵀ"]["shape"][-1] == 4096
    assert d["totals"]["kv_cache_tokens"] == 4096
    p = build_trace(m, Workload(seq=10_000))
    assert p["totals"]["kv_cache_tokens"] == 4096  # the cache keeps at most W tokens
    assert any(s["name"] == "sliding-window mask" for s in p["stages"])


def test_causal_half_counts_the_lower_triangle():
    m = sources.load_preset("seed-tiny")
    full = build_trace(m, Workload(batch=2, seq=4))
    half = build_trace(m, Workload(batch=2, seq=4, attention_flops="causal"))
    qk_full = {s["name"]: s for s in full["stages"]}["QKᵀ"]
    qk_half = {s["name"]: s for s in half["stages"]}["QKᵀ"]
    assert qk_full["flops"] == 2 * 2 * 2 * 16 * 4
    assert qk_half["flops"] == 2 * 2 * 2 * (4 * 5 // 2) * 4
    assert qk_half["flops_formula"] == "B·H·T·Dh·(T+1)"


def test_kv_replication_when_fewer_kv_heads_than_ranks():
    m = ModelConfig(
        vocab_size=100,
        d_model=64,
        n_layers=2,
        n_heads=8,
        n_kv_heads=2,
        d_ff=128,
        positions="rope",
        ffn="swiglu",
        norm="rmsnorm",
    )
    d = build_trace(m, Workload(seq=16, tp=4))
    tp = d["parallel"]["tp"]
    assert tp["kv_heads_per_rank"] == 1 and tp["kv_heads_replicated"]
    # each rank holds one full KV head: half the model's KV cache, not a quarter
    assert tp["kv_cache_bytes_per_rank"] * 2 == d["totals"]["kv_cache_bytes"]


def test_pipeline_split_follows_vllm():
    assert pp_layers(80, 2) == [40, 40]
    assert pp_layers(10, 4) == [2, 3, 3, 2]
    assert sum(pp_layers(7, 7)) == 7


def test_paged_blocks():
    m = sources.load_preset("llama3-8b")
    d = build_trace(m, Workload(batch=3, seq=33, block_size=16))
    assert d["totals"]["kv_cache_blocks"] == 3 * 3
    assert d["totals"]["kv_cache_paged_bytes"] == 9 * 16 * d["totals"]["kv_cache_bytes_per_token"]


def test_json_path_stays_light():
    """`trace --json` imports neither rich nor numpy (start-up is measured in benchmarks/)."""
    import subprocess
    import sys

    code = (
        "import sys, atexit\n"
        "atexit.register(lambda: sys.stderr.write(str(sorted(m for m in ('rich', 'numpy') "
        "if m in sys.modules))))\n"
        "sys.argv = ['shapecalc', 'trace', '--preset', 'llama2-70b', '--json']\n"
        "from shapecalc.cli import main\nmain()\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stderr.strip() == "[]"


def test_hf_config_json_gives_the_published_counts(cli):
    """Each real config.json, read through --hf-config, totals its published parameter count."""
    import json
    from pathlib import Path

    folder = Path(__file__).parent / "data" / "hf"
    published = json.loads((folder / "published.json").read_text())
    for stem, want in published.items():
        r = cli("trace", "--hf-config", str(folder / f"{stem}.json"), "--seq", "16", "--json")
        assert r.code == 0, (stem, r.err)
        assert r.json()["totals"]["params"] == want, stem


def test_per_rank_listing(cli):
    r = cli("trace", "--preset", "llama2-70b", "--tp", "4", "--seq", "128", "--per-rank")
    assert r.code == 0, r.err
    assert "one rank's stages" in r.out and "[B,T,H·Dh/p] = [1,128,2048]" in r.out
    assert "attention all-reduce" in r.out and "FFN all-reduce" in r.out
    doc = cli("trace", "--preset", "llama2-70b", "--tp", "4", "--seq", "128", "--per-rank",
              "--json").json()
    TraceOut.model_validate(doc)
    q = next(s for s in doc["rank_stages"] if s["name"] == "q projection")
    assert q["dims"] == ["B", "T", "H·Dh/p"] and q["params"] * 4 == 8192 * 8192
    assert "rank_stages" not in cli(*LEDGER).json()  # only when asked


def test_trace_formats_and_exports(cli, tmp_path):
    import csv
    import io
    import json

    doc = cli("trace", "--json").json()
    r = cli("trace", "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(r.out)))
    assert len(rows) == len(doc["stages"])
    assert [int(x["flops"]) for x in rows] == [s["flops"] for s in doc["stages"]]
    r = cli("trace", "--format", "markdown")
    assert "| QKᵀ | [B,H,T,T] = [2,2,4,4] | 2·B·H·T²·Dh | 512 |" in r.out
    out = tmp_path / "t.json"
    assert cli("trace", "--format", "json", "--output", str(out)).code == 0
    assert json.loads(out.read_text()) == doc
    svg, html = tmp_path / "t.svg", tmp_path / "t.html"
    r = cli("trace", "--svg", str(svg), "--html", str(html))
    assert r.code == 0 and svg.read_text().startswith("<svg") and "QKᵀ" in html.read_text()
    assert "where FLOPs go" in r.out and "where parameters go" in r.out
    assert cli("trace", "--format", "yaml").code == 2
