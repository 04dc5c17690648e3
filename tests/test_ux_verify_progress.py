"""Issue 12, defect 4: verify's progress advances by real work and shows step k of n.

A recorder stands in for the terminal bar (no tty needed): over a whole verify, k never goes back,
the layers of every forward run move it, and it ends at n/n — for every shape of run verify makes
(one rank or p ranks, prefill or decode, a decode step refused by a learned table, T = 1, expert
parallelism), so the count of runs made up front (`runs_planned`) is the count verify runs."""

from __future__ import annotations

import io
import re

import pytest

from shapecalc.check.verify import runs_planned, verify
from shapecalc.model.config import ModelConfig, Workload

TINY = dict(vocab_size=11, d_model=8, n_layers=3, n_heads=2, d_ff=16, positions="rope")
CASES = {
    "one rank": (TINY, dict(batch=2, seq=5)),
    "p ranks, decode": (TINY, dict(batch=2, seq=5, tp=2, phase="decode")),
    "learned table full": ({**TINY, "positions": "learned", "max_positions": 6},
                           dict(batch=1, seq=6)),
    "one token": (TINY, dict(batch=1, seq=1)),
    "expert parallel": ({**TINY, "ffn": "swiglu", "n_experts": 4, "experts_per_token": 2},
                        dict(batch=4, seq=3, ep=2)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_progress_counts_every_step_once(name):
    fields, wl = CASES[name]
    seen: list[tuple[str, int, int]] = []
    doc = verify(ModelConfig(**fields), Workload(**wl), precision="float64",
                 progress=lambda label, k, n: seen.append((label, k, n)))
    assert doc["ok"]
    ks = [k for _, k, _ in seen]
    (n,) = {n for _, _, n in seen}  # one denominator for the whole run
    K = doc["layers_run"]
    assert K == 3
    assert ks == sorted(ks), "progress went back"
    assert ks[0] == 0 and ks[-1] == n, "it must end at n of n"
    assert n % (K + 1) == 0  # K layers and the head of each forward run
    # each layer of each run is a step of its own: every k from 0 to n is reported
    assert set(ks) == set(range(n + 1))
    labels = [label for label, _, _ in seen]
    assert labels[0].startswith("prefill, p=1")
    if wl.get("tp", 1) > 1:
        assert any(label.startswith(f"prefill, p={wl['tp']}") for label in labels)


def test_runs_planned_by_hand():
    # p=1 with decode: prefill+decode contiguous, prefill+decode paged, the full T+1 forward,
    # the causal check, the padding check's three runs
    assert runs_planned(True, 1, 1, 5) == 2 + 2 + 1 + 1 + 3
    # p=4 adds the sharded prefill and decode; no decode (learned table full) drops 4 runs
    assert runs_planned(True, 4, 1, 5) == 11
    assert runs_planned(False, 1, 1, 5) == 1 + 1 + 1 + 3
    # T=1 without decode: no causal or padding check
    assert runs_planned(False, 1, 1, 1) == 2


def test_the_bar_shows_step_k_of_n():
    """The CLI's bar on a (forced) terminal: what runs now and `step k/n`."""
    from rich.console import Console

    from shapecalc.cli.verify import _progress

    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=100, color_system=None)
    bar, report = _progress(True, console)
    with bar:
        report("prefill, p=4", 3, 24)
        bar.refresh()
    assert "prefill, p=4" in out.getvalue() and re.search(r"step +3/24", out.getvalue())
    # issue 25: a long step (a real-width layer) must still show time passing
    assert re.search(r"3/24 +\d+:\d\d:\d\d", out.getvalue())
    assert _progress(False) == (None, None)
