"""Internal consistency of tests/data/moe_reference.json (written by
`tests/torch_reference/harness.py moe`): every case has its keys, its breakdowns add up to its
totals, its routing and expert FLOPs agree with each other and with its hf_config, and every
published config's meta-device parameter count equals the published figure. No shapecalc calls
here, and no torch: the file is only read.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"
DOC = json.loads((DATA / "moe_reference.json").read_text())
CASES = {c["name"]: c for c in DOC["cases"]}
MOE = [name for name, c in CASES.items() if c["experts_implementation"] is not None]
PUBLISHED_STEMS = {
    "mixtral-8x7b", "mixtral-8x22b", "qwen1.5-moe-a2.7b", "qwen3-30b-a3b", "qwen3-235b-a22b",
    "qwen3-8b", "phi3.5-moe", "gpt-oss-20b", "gpt-oss-120b",
}  # fmt: skip
CASE_KEYS = {
    "name", "model_type", "hf_config", "batch", "seq", "experts_implementation",
    "prefill_flops", "prefill_last_flops", "decode_flops", "prefill_ops", "prefill_last_ops",
    "decode_ops", "prefill_modules", "prefill_last_modules", "decode_modules", "params",
    "params_meta", "note",
}  # fmt: skip
MOE_KEYS = {"routing", "expert_flops", "prefill_flops_by_experts_implementation"}
PHASES = ("prefill", "prefill_last", "decode")


def test_document_header():
    assert {"torch", "transformers", "how", "cases", "errors", "published"} <= set(DOC)
    assert DOC["errors"] == []
    assert DOC["torch"].startswith("2.13.0") and DOC["transformers"] == "5.24.0"
    families = {c["model_type"] for c in DOC["cases"]}
    assert {"mixtral", "qwen2_moe", "qwen3_moe", "phimoe", "gpt_oss"} <= families


@pytest.mark.parametrize("name", sorted(CASES))
def test_case_keys_and_totals(name):
    c = CASES[name]
    assert CASE_KEYS <= set(c), CASE_KEYS - set(c)
    assert c["hf_config"]["model_type"] == c["model_type"]
    assert (c["batch"], c["seq"]) == (5, 7)
    for phase in PHASES:
        total = c[f"{phase}_flops"]
        assert isinstance(total, int) and total > 0
        assert sum(c[f"{phase}_ops"].values()) == total, phase
        assert sum(c[f"{phase}_modules"].values()) == total, phase
    assert c["decode_flops"] < c["prefill_last_flops"] < c["prefill_flops"]
    assert c["params"] == c["params_meta"] > 0
    assert bool(MOE_KEYS & set(c)) == (c["experts_implementation"] is not None)


@pytest.mark.parametrize("name", MOE)
def test_routing_is_real_and_consistent(name):
    c = CASES[name]
    assert c["experts_implementation"] == "eager"
    k = c["hf_config"]["num_experts_per_tok"]
    e = c["hf_config"].get("num_local_experts") or c["hf_config"]["num_experts"]
    tokens = {"prefill": c["batch"] * c["seq"], "decode": c["batch"]}
    assert set(c["routing"]) == set(tokens)
    for phase, layers in c["routing"].items():
        assert layers, phase
        for layer, r in layers.items():
            loads = r["tokens_per_expert"]
            assert (r["tokens"], r["top_k"], len(loads)) == (tokens[phase], k, e), layer
            assert r["assignments"] == r["tokens"] * k == sum(loads)
            assert r["experts_hit"] == sum(1 for n in loads if n)
            assert max(loads) <= r["tokens"]  # top-k picks distinct experts per token
            assert r["experts_hit"] > k  # different tokens go to different experts
    assert set(c["routing"]["prefill"]) == set(c["routing"]["decode"])


@pytest.mark.parametrize("name", MOE)
def test_expert_flops_are_the_routed_work(name):
    """2 * assignments * 3 * D * Dff_e per MoE layer (gate_up and down, routed pairs only)."""
    c = CASES[name]
    cfg = c["hf_config"]
    dff = cfg.get("moe_intermediate_size") or cfg["intermediate_size"]
    for phase in ("prefill", "decode"):
        assert set(c["expert_flops"][phase]) == set(c["routing"][phase])
        for layer, r in c["routing"][phase].items():
            want = 2 * r["assignments"] * 3 * cfg["hidden_size"] * dff
            measured = c[f"{phase}_modules"][f"{layer}.experts"]
            assert c["expert_flops"][phase][layer] == want == measured, (phase, layer)
    experts = sum(c["expert_flops"]["prefill"].values())
    impl = c["prefill_flops_by_experts_implementation"]
    assert impl["eager"] == impl["batched_mm"] == c["prefill_flops"]
    assert impl["grouped_mm"] == c["prefill_flops"] - experts  # no FLOP formula for grouped_mm


def test_published_configs():
    pub = DOC["published"]
    assert set(pub) == PUBLISHED_STEMS
    for stem, p in pub.items():
        path = DATA / "hf" / f"{stem}.json"
        assert p["file"] == f"tests/data/hf/{stem}.json" and path.exists(), stem
        raw = json.loads(path.read_text())
        assert raw["model_type"] == p["model_type"] and raw["architectures"] == p["architectures"]
        assert p["figure"] and p["source"] and "/" in p["repo"]
        assert isinstance(p["params_meta"], int) and p["params_meta"] > 0
        if p["params_published"] is not None:
            assert p["params_meta"] == p["params_published"], stem


def test_published_figures_round_to_the_counts():
    """Some number in the publisher's figure ("46.7B", "141B", "20.91B") is the exact count rounded
    to that number's digits."""
    for stem, p in DOC["published"].items():
        figures = re.findall(r"(\d+(?:\.(\d+))?)B", p["figure"])
        assert any(
            round(p["params_meta"] / 1e9, len(decimals)) == float(number)
            for number, decimals in figures
        ), (stem, p["figure"])
