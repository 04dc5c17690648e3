"""Published checkpoint sizes: gpt-oss-20b and gpt-oss-120b in MXFP4, DeepSeek-V3 in block fp8.

Every tensor's bytes come from the config.json and the format (totals.weight_tensors); their sum
is checked against what the search found (tests/data/quant_published.json, with its sources).
DeepSeek-V3's checkpoint also holds what shapecalc's model leaves out, derived here from the same
config: each MoE router's fp32 e_score_correction_bias (a buffer of noaux_tc routing) and the
num_nextn_predict_layers multi-token-prediction layer (a MoE layer, its enorm, hnorm, eh_proj
[D, 2D] bf16, and its own bf16 copies of the embedding and of the head with its norm).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from shapecalc.costs.trace import build_trace
from shapecalc.inputs.hf import load_hf_config
from shapecalc.inputs.sources import load_preset, published
from shapecalc.model.config import ModelConfig, Workload
from shapecalc.model.quant import source_fields

ROOT = Path(__file__).parents[1]
PUBLISHED = json.loads((ROOT / "tests" / "data" / "quant_published.json").read_text())


def tensors(m: ModelConfig) -> list[dict]:
    wl = Workload(batch=1, seq=1, **source_fields(m, {}))
    return build_trace(m, wl)["totals"]["weight_tensors"]


@pytest.mark.parametrize("stem", ["gpt-oss-20b", "gpt-oss-120b"])
def test_gpt_oss_mxfp4_equals_the_published_total_size(stem):
    want = PUBLISHED[stem]["total_size"]
    m = load_hf_config(ROOT / PUBLISHED[stem]["config"])
    assert sum(t["bytes"] for t in tensors(m)) == want
    preset = load_preset(f"{stem}-mxfp4")
    assert published(f"{stem}-mxfp4")["checkpoint_bytes"] == want
    t = build_trace(preset, Workload(batch=1, seq=1, dtype="mxfp4"))["totals"]
    assert t["weight_bytes"] == want
    # the same model at its width: the published bf16 parameter count
    assert t["params"] == published(stem)["params"]


def _layers(name: str) -> set[int]:
    m = re.match(r"model\.layers\.([0-9,\-]+)\.", name)
    out: set[int] = set()
    for part in m.group(1).split(",") if m else ():
        a, _, b = part.partition("-")
        out |= set(range(int(a), int(b or a) + 1))
    return out


def test_deepseek_v3_fp8_derived_tensor_by_tensor():
    ref = PUBLISHED["deepseek-v3"]
    raw = json.loads((ROOT / ref["config"]).read_text())
    m = load_hf_config(ROOT / ref["config"])
    assert m.quantization is not None and m.quantization.block == (128, 128)
    E, D, V = m.n_experts, m.d_model, m.vocab_size
    moe = [i for i, k in enumerate(m.ffn_types or ()) if k == "moe"]
    mtp = raw["num_nextn_predict_layers"]
    assert (len(moe), mtp) == (58, 1)
    size = {"fp8-e4m3": 1, "fp32": 4, "bf16": 2}
    nbytes = elements = count = 0
    layer = {"bytes": 0, "elements": 0, "tensors": 0}  # one MoE layer, for the MTP layer
    for t in tensors(m):
        n = math.prod(t["shape"])
        assert t["bytes"] == n * size[t["dtype"]] * t["count"]
        # the Hub's checkpoint stores each routed expert's matrices apart: E tensors a row
        apart = E if ".mlp.experts." in t["name"] else 1
        nbytes, elements, count = (nbytes + t["bytes"], elements + n * t["count"],
                                   count + t["count"] * apart)
        on = _layers(t["name"])
        if moe[0] in on:
            each = t["count"] // len(on)
            layer["bytes"] += n * size[t["dtype"]] * each
            layer["elements"] += n * each
            layer["tensors"] += each * apart
    assert nbytes == build_trace(m, Workload(batch=1, seq=1, dtype="fp8"))["totals"][
        "weight_bytes"]
    # what shapecalc's model leaves out: e_score_correction_bias, fp32 [E], on every MoE layer
    # (the MTP layer's too); the MTP layer: a MoE layer, enorm, hnorm, shared_head.norm (bf16
    # [D] each), eh_proj bf16 [D, 2D], embed_tokens and shared_head.head bf16 [V, D]
    bias = (len(moe) + mtp) * E
    nbytes += bias * 4 + mtp * (layer["bytes"] + 3 * D * 2 + 2 * D * D * 2 + 2 * V * D * 2)
    elements += bias + mtp * (layer["elements"] + 3 * D + 2 * D * D + 2 * V * D)
    count += len(moe) + mtp + mtp * (layer["tensors"] + 3 + 1 + 2)
    assert count == ref["tensors"] == 91_991
    assert elements == ref["elements"] == 684_531_386_000
    assert round(nbytes / 2**30, 2) == ref["tensor_gib_rounded"]
    assert nbytes == 688_574_839_360  # this derivation's sum (total_size itself not found)
    # the repository's files are the tensors plus each file's JSON header (~130 bytes a tensor)
    headers = ref["file_bytes"] - nbytes
    assert 0 < headers < 200 * count
