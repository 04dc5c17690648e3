"""Day-0 support: a config.json whose model_type the reader's table does not hold yet, measured
by transformers itself on the meta device at the asked workload (issue 21, item 6).

No stage formulas: the totals are what transformers' own model computes (its parameters,
FlopCounterMode over the prefill and one decode step, every tensor its cache holds after the
prefill), so every output carries `label()`. The table catches up later; until then a planner
gets exact numbers on release day. Imports torch (through `measure`), so only the commands
call it, after `reference.require()`.
"""

from __future__ import annotations

from typing import Any

from ..model.config import DTYPE_BITS, ShapecalcError
from . import PINNED

# the dtypes transformers builds a model in (measure.DTYPES), without importing torch
DTYPES = ("fp32", "bf16", "fp16")


def label() -> str:
    """What every day-0 output says of its numbers."""
    import transformers

    major = transformers.__version__.split(".")[0]
    return f"measured by transformers {major}.x ({transformers.__version__}), no stage formulas"


def default_seq(raw: dict[str, Any], preferred: int) -> int:
    """T when none is given: `preferred`, or the model's positions when fewer (its config's
    max_position_embeddings, or its text_config's)."""
    inner = raw.get("text_config")
    text: dict[str, Any] = inner if isinstance(inner, dict) else {}
    most = raw.get("max_position_embeddings") or text.get("max_position_embeddings")
    return min(preferred, most) if isinstance(most, int) and most > 0 else preferred


def check_workload(raw: dict[str, Any], batch: int, seq: int, dtype: str, logits: str) -> None:
    """What a day-0 measurement can take, refused in one line otherwise."""
    if dtype not in DTYPES:
        raise ShapecalcError("dtype", f"{dtype!r}: a day-0 measurement builds the model in "
                             f"transformers, which takes {', '.join(DTYPES)}")
    if logits not in ("all", "last"):
        raise ShapecalcError("logits", f"{logits!r} is not one of all, last")
    if "quantization_config" in raw:
        raise ShapecalcError("quantization_config", "a day-0 measurement counts the "
                             "unquantized model: its weight bytes would not be the checkpoint's")
    for name, v in (("batch", batch), ("seq", seq)):
        if v < 1:
            raise ShapecalcError(name, f"{v} must be ≥ 1")


def measure(raw: dict[str, Any], name: str, source: str, batch: int, seq: int, dtype: str,
            logits: str) -> dict[str, Any]:
    """The day-0 document of a config.json's dict `raw`: model, workload, totals (params, both
    steps' FLOPs, the cache's bytes split into KV and states, weight bytes), the cache tensor by
    tensor, and how it was measured."""
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    from . import measure as m
    from .measure import KV_PARTS

    check_workload(raw, batch, seq, dtype, logits)
    if raw.get("model_type") not in CONFIG_MAPPING:
        raise ShapecalcError("model_type", f"{raw.get('model_type')!r} is not supported, and "
                             f"transformers {transformers.__version__} does not know it either")
    try:
        rec = m.measure_config(raw, batch, seq, dtype, day0=True)
    except Exception as e:  # transformers' own refusal of the config, in one line
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ShapecalcError("hf-config", f"transformers could not build or run it: "
                             f"{reason}") from None
    if logits == "last" and rec["prefill_last"] is None:
        raise ShapecalcError("logits", f"{rec['model_class']}'s forward has no logits_to_keep: "
                             "only --logits all can be measured")
    cache = rec["cache_tensors"]
    kv = sum(t["bytes"] for t in cache if t["part"] in KV_PARTS)
    prefill = rec["prefill_last" if logits == "last" else "prefill"]["flops"]
    parts: dict[str, dict[str, Any]] = {}
    for t in cache:
        p = parts.setdefault(t["part"], {"part": t["part"], "tensors": 0, "bytes": 0,
                                         "dtypes": []})
        p["tensors"] += 1
        p["bytes"] += t["bytes"]
        if t["dtype"] not in p["dtypes"]:
            p["dtypes"].append(t["dtype"])
    return {
        "model": {"name": name, "model_type": rec["model_type"],
                  "model_class": rec["model_class"], "source": source},
        "measured_by": {"label": label(), "torch": rec["torch"],
                        "transformers": rec["transformers"], "checked_against": PINNED,
                        "device": "meta", "attention": "eager",
                        "experts_implementation": rec["experts_implementation"]},
        "workload": {"batch": batch, "seq": seq, "dtype": dtype, "logits": logits},
        "totals": {
            "params": rec["params"],
            "prefill_flops": prefill,
            "decode_flops": rec["decode"]["flops"],
            "weight_bytes": rec["params"] * DTYPE_BITS[dtype] // 8,
            "kv_cache_bytes": kv,
            "state_cache_bytes": sum(t["bytes"] for t in cache) - kv,
            "cache_convention": "transformers' cache after the prefill, every tensor once "
                                "(a sliding layer keeps what transformers keeps)",
        },
        "cache": list(parts.values()),
        "cache_tensors": cache,
    }


def fit(doc: dict[str, Any], memory_bytes: int, utilization: float, peak: float | None,
        bandwidth: float) -> dict[str, Any]:
    """One GPU at the measured workload: weights plus the caches against the usable memory, the
    largest batch the caches leave room for (a sequence's cache is the same bytes in any batch:
    per sequence = measured ÷ B), and the roofline bounds of both steps. Activations and
    workspace are not counted: a day-0 model has no stage formulas to count them from."""
    t, B = doc["totals"], doc["workload"]["batch"]
    cache = t["kv_cache_bytes"] + t["state_cache_bytes"]
    per_seq, rem = divmod(cache, B)
    if rem:  # each sequence its own rows of every cache tensor
        raise ShapecalcError("batch", f"the measured cache ({cache} B) is not B={B} equal parts")
    usable = int(memory_bytes * utilization)
    room = usable - t["weight_bytes"]
    return {
        "usable_bytes": usable, "weight_bytes": t["weight_bytes"], "cache_bytes": cache,
        "cache_bytes_per_sequence": per_seq, "total_bytes": t["weight_bytes"] + cache,
        "fits": t["weight_bytes"] + cache <= usable,
        "max_batch": max(room // per_seq, 0) if per_seq else None,
        "prefill_s_bound": t["prefill_flops"] / peak if peak else None,
        "decode_step_s_bound": (t["weight_bytes"] + cache) / bandwidth,
        "not_counted": "activations and workspace (no stage formulas); a single GPU only",
    }
