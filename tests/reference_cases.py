"""What the tests against the reference measurements share: a measured case's config.json read as
a user's would be, and the totals of one trace of it."""

from __future__ import annotations

import json
from pathlib import Path

from shapecalc.costs.trace import build_trace
from shapecalc.inputs.hf import load_hf_config
from shapecalc.model.config import ModelConfig, Workload


def load_case(tmp_path: Path, cfg: dict) -> ModelConfig:
    """A case's config.json, written to a file and read by the HF reader."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return load_hf_config(path)


def totals(m: ModelConfig, T: int, **kw) -> dict:
    """The totals of one trace at B=1, T=T (and the workload fields given)."""
    return build_trace(m, Workload(batch=1, seq=T, **kw))["totals"]
