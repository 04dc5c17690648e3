"""Workloads as published: length caps (`max=N`), what MEAN means, and the named datasets
(presets/datasets/serving.json) with their sources; a dataset and explicit lengths conflict."""

from __future__ import annotations

import random

import pytest

from shapecalc.model.config import ShapecalcError
from shapecalc.serve import datasets
from shapecalc.serve import workload as W


def test_a_cap_clips_each_draw_and_keeps_the_draws_below_it():
    free, capped = W.parse_lengths("lognormal:300,0.6", "p"), W.parse_lengths(
        "lognormal:300,0.6,max=400", "p")
    a = [free.draw(r) for r in [random.Random(1)] for _ in range(2000)]
    b = [capped.draw(r) for r in [random.Random(1)] for _ in range(2000)]
    assert b == [min(x, 400) for x in a]  # the same draws, clipped: the seed's stream unchanged
    assert max(b) == 400 and max(a) > 400


def test_capped_means_by_hand():
    # uniform 1..10 capped at 5: (1 + 2 + 3 + 4 + 5 + 5 × 5) / 10 = 4
    assert W.parse_lengths("uniform:1,10,max=5", "p").mean == pytest.approx(4.0)
    assert W.parse_lengths("uniform:1,10,max=50", "p").mean == pytest.approx(5.5)
    # MEAN is the uncapped lognormal's own mean: a far cap leaves it
    assert W.parse_lengths("lognormal:300,0.6,max=100000", "p").mean == pytest.approx(300, 1e-9)
    # a near cap: the closed form E[min(X, c)] against the mean of 40,000 draws
    capped = W.parse_lengths("lognormal:300,1.0,max=400", "p")
    rng = random.Random(0)
    draws = [capped.draw(rng) for _ in range(40000)]
    assert sum(draws) / len(draws) == pytest.approx(capped.mean, rel=0.02)
    assert capped.mean < 300


@pytest.mark.parametrize("text", ["lognormal:300,0.6,max=0", "lognormal:300,0.6,max=x",
                                  "uniform:10,20,max=5", "lognormal:300,0.6,cap=5",
                                  "lognormal:300,0.6,max=5,max=6"])
def test_bad_caps_name_the_flag(text):
    with pytest.raises(ShapecalcError) as e:
        W.parse_lengths(text, "prompt-tokens")
    assert e.value.field == "prompt-tokens"


def test_every_dataset_parses_and_cites_its_source():
    t = datasets.table()
    assert set(t) == {"sharegpt", "openorca", "sonnet", "random"}
    for name, d in t.items():
        W.parse_lengths(d["prompt"], "prompt-tokens")
        W.parse_lengths(d["output"], "output-tokens")
        assert d["follows"] and d["assumed"] and d["sources"], name
        assert all(s["url"].startswith("https://") and s["quote"] for s in d["sources"])
    # as their sources set them: MLPerf's OpenOrca within 1024 tokens and 294.45 tokens a
    # sample out; vLLM's sonnet 550/150 and random 1024/128
    assert t["openorca"]["output"] == "lognormal:294.45,0.6,max=1024"
    assert "1024" in t["openorca"]["prompt"] and "294.45" in t["openorca"]["sources"][0]["quote"]
    assert (t["sonnet"]["prompt"], t["sonnet"]["output"]) == ("550", "150")
    assert (t["random"]["prompt"], t["random"]["output"]) == ("1024", "128")


def test_dataset_on_the_command_line(cli):
    base = ("serve", "--preset", "llama3-8b", "--gpu", "h100-sxm", "--requests", "10", "--rate",
            "5")
    r = cli(*base, "--dataset", "sonnet", "--json")
    assert r.code == 0, r.err
    w = r.json()["workload"]
    assert (w["dataset"], w["prompt"], w["output"]) == ("sonnet", "550", "150")
    for flag in ("--prompt-tokens", "--output-tokens"):
        bad = cli(*base, "--dataset", "sharegpt", flag, "100")
        assert bad.code == 2 and bad.err.startswith("error: dataset: ") and flag in bad.err
    assert cli(*base, "--dataset", "alpaca").err.startswith("error: dataset: ")


def test_sharegpt_means_are_the_measured_ones():
    # vLLM's benchmark_serving over 1,000 ShareGPT requests (the file's second source):
    # 217,393 input and 197,767 output tokens → 217.393 and 197.767 a request
    d = datasets.table()["sharegpt"]
    assert "Total input tokens: 217393" in d["sources"][1]["quote"]
    assert W.parse_lengths(d["prompt"], "p").mean == pytest.approx(217393 / 1000, rel=0.01)
    assert W.parse_lengths(d["output"], "o").mean == pytest.approx(197767 / 1000, rel=0.01)
