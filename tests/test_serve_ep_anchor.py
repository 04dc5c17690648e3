"""A published anchor of EP with data-parallel attention: SGLang's DeepSeek-V3 on 96 H100
with PD disaggregation and large-scale EP (tests/data/ep_anchor.json: source, quote, layouts),
each pool predicted with its own layout and held within the stated error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

DATA = json.loads((Path(__file__).parent / "data" / "ep_anchor.json").read_text())
POOLS = {p["id"]: p for p in DATA["pools"]}


def _serve(cli, pool: dict, requests: int, output: int) -> dict:
    r = cli("serve", "--preset", DATA["model"], "--gpu", DATA["gpu"], "--tp", str(pool["tp"]),
            "--ep", str(pool["ep"]), "--ep-mode", pool["ep_mode"], "--redundant-experts",
            str(pool["redundant_experts"]), "--prompt-tokens", str(DATA["input_len"]),
            "--output-tokens", str(output), "--requests", str(requests), "--json")
    assert r.code == 0, r.err
    return json.loads(r.out)


@pytest.mark.slow
def test_the_prefill_pool_per_node(cli):
    p = POOLS["prefill"]
    doc = _serve(cli, p, 16 * p["ep"], 1)  # 16 prompts an attention rank, prefill only
    got = doc["throughput"]["input_tokens_per_s"] / p["nodes"]
    assert got == pytest.approx(p["predicted"], rel=0.01)  # the recorded prediction
    assert abs(got / p["measured"] - 1) <= 0.25, got


def test_the_decode_pool_per_node(cli):
    p = POOLS["decode"]
    doc = _serve(cli, p, 2 * p["ep"], 4)
    assert doc["deployment"]["attention_ranks"] == 72
    sat = doc["saturated_per_replica"]
    assert sat["max_decode_batch"] == 72 * 256  # every rank at max_num_seqs
    got = sat["output_tokens_per_s"] / p["nodes"]
    assert got == pytest.approx(p["predicted"], rel=0.01)
    assert abs(got / p["measured"] - 1) <= 0.25, got
