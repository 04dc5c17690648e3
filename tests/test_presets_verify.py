"""`shapecalc verify` passes on every preset: K=1 real-width layer, B=1, T=8, tp=1 and tp=2.

The largest presets take tens of seconds (weights are generated, or streamed, at real width);
this is the suite's slowest file by design: it is the proof that the presets' numbers hold.
"""

from __future__ import annotations

import pytest

from shapecalc.check.verify import verify
from shapecalc.inputs import sources
from shapecalc.model.config import Workload


@pytest.mark.parametrize("name", sorted(sources.list_presets()))
def test_verify_passes_on_every_preset(name):
    model = sources.load_preset(name)
    tp = 2 if model.n_heads % 2 == 0 and model.d_ff % 2 == 0 and model.kv_heads % 2 == 0 else 1
    doc = verify(model, Workload(batch=1, seq=8, tp=tp), layers=1)
    failed = [c["name"] for c in doc["checks"] if not c["ok"]]
    assert not failed, failed
    assert doc["ok"] and len(doc["checks"]) >= 20
