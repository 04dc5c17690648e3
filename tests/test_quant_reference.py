"""shapecalc's quantized tensors against the ones transformers' quantizers build on CPU
(tests/quant_reference.py says which do, and how; tests/data/quant_reference.json holds what they
built, so this runs without torch; the live test re-measures where torch is installed)."""

from __future__ import annotations

import importlib.util
import json
import math
import re
from pathlib import Path

import pytest

from shapecalc.costs.trace import build_trace
from shapecalc.inputs.hf import load_hf_config
from shapecalc.model.config import Workload
from shapecalc.model.quant import source_fields

HERE = Path(__file__).parent
REF = json.loads((HERE / "data" / "quant_reference.json").read_text())
HAS_TORCH = all(importlib.util.find_spec(m) for m in ("torch", "transformers"))


def parts(config: dict, tmp_path: Path) -> tuple[dict[str, int], list[dict]]:
    """shapecalc's data and scale bytes and unquantized elements of a config.json."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    m = load_hf_config(path)
    t = build_trace(m, Workload(batch=1, seq=1, **source_fields(m, {})))["totals"]
    out = {"data_bytes": 0, "scale_bytes": 0, "unquantized_elements": 0}
    for x in t["weight_tensors"]:
        if x["part"] == "data":
            out["data_bytes"] += x["bytes"]
        elif x["part"] == "scales":
            out["scale_bytes"] += x["bytes"]
        else:
            out["unquantized_elements"] += math.prod(x["shape"]) * x["count"]
    return out, t["weight_tensors"]


@pytest.mark.parametrize("name", sorted(REF["fp8"]))
def test_fp8_equals_what_transformers_builds(name, tmp_path):
    case = REF["fp8"][name]
    got, _ = parts(case["config"], tmp_path)
    # e4m3 data and fp32 scale_inv bytes exactly; the rest by elements (transformers keeps
    # DeepSeek's router in fp32, the checkpoint stores it bf16)
    assert got == {k: case[k] for k in got}, name
    # each matrix's scale_inv shape: ⌈out/128⌉ × ⌈in/128⌉, as FP8Linear allocates it
    _, ours = parts(case["config"], tmp_path)
    rows = {}  # (layer, name below it) → shape
    for x in ours:
        m = re.match(r"model\.layers\.([0-9,\-]+)\.(.+)", x["name"])
        for part in m.group(1).split(",") if m else ():
            a, _, b = part.partition("-")
            for i in range(int(a), int(b or a) + 1):
                rows[(i, m.group(2))] = x["shape"]
    for n, shape, _ in case["params"]:
        if not n.endswith("weight_scale_inv") or ".mlp.experts." in n:
            continue  # transformers 5 fuses the experts: their bytes are compared above
        _, _, i, tail = n.split(".", 3)
        assert rows[(int(i), tail)] == shape, n


def test_mxfp4_blocks_equal_transformers_experts(tmp_path):
    case = REF["mxfp4_experts"]
    got, ours = parts(case["config"], tmp_path)
    # Mxfp4GptOssExperts holds the packed blocks ([E, out, in/2] uint8): the same bytes as the
    # checkpoint's *_blocks [E, out, in/32, 16]; its scales are attached at load, not parameters
    assert got["data_bytes"] == case["data_bytes"] * case["layers"]
    scales = sum(x["bytes"] for x in ours if x["part"] == "scales")
    assert scales * 16 == got["data_bytes"]  # an e8m0 byte for each 16 bytes of a 32-block


@pytest.mark.skipif(not HAS_TORCH, reason="needs torch and transformers")
def test_live_reference_matches_the_recorded_one():
    from tests import quant_reference

    live = quant_reference.measure()
    for name, case in REF["fp8"].items():
        assert {k: live["fp8"][name][k] for k in ("data_bytes", "scale_bytes",
                                                  "unquantized_elements")} == {
            k: case[k] for k in ("data_bytes", "scale_bytes", "unquantized_elements")}, name
    params = json.loads(json.dumps(live["mxfp4_experts"]["params"]))  # tuples as the file's lists
    assert params == REF["mxfp4_experts"]["params"]
