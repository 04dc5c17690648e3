"""verify's checks of the multi-token-prediction modules: the executor runs each once after the
model, and their params, FLOPs and cache stand apart from the model's totals."""

from __future__ import annotations

from typing import Any

from ..model.stage import Stage


def mtp_checks(stages: list[Stage], kv_bytes: int, totals: dict[str, Any]) -> list[dict]:
    """`stages`, `kv_bytes` (the MTP layers' caches): one executor run; `totals`: the trace's."""
    mtp = [s for s in stages if s.group == "mtp"]
    measured = {"params": sum(s.params for s in mtp), "flops": sum(s.flops for s in mtp),
                "kv_cache_bytes": kv_bytes}
    return [{"name": f"MTP {key.replace('_', ' ').replace('kv', 'KV')}",
             "symbolic": totals[f"mtp_{key}"], "measured": value,
             "ok": totals[f"mtp_{key}"] == value} for key, value in measured.items()]
