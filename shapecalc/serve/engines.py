"""Engine profiles (`serve --engine vllm|sglang|trtllm[@VERSION]`): each a named set of
scheduling policies, the engine's documented defaults and the terms of its iteration under load,
read from one data file (engines.json: what each profile follows, with its source and quote).

Policies (scheduler.py runs them):
- order: `decode-first` (vLLM V1, TensorRT-LLM's in-flight batching: every running sequence
  decodes, the token budget left goes to prefill chunks) or `prefill-first` (SGLang: a step
  that can prefill prefills only, the decoders wait for the next step);
- capacity: `evict` (a sequence is admitted while its next chunk's blocks are free and is
  preempted by recompute when the cache runs out) or `no-evict` (TensorRT-LLM's
  GUARANTEED_NO_EVICT: admitted only when the blocks of its whole prompt and output are free
  beside what the running sequences will still take, so nothing is ever preempted);
- kv_memory: `of-total` (vLLM's gpu_memory_utilization: --utilization of the GPU's memory) or
  `of-free` (TensorRT-LLM's kv_cache_free_gpu_mem_fraction: of what the weights leave);
- attention: `overlapped` (the KV reads share the step's max(compute, memory) with the GEMMs:
  today's model) or `separate` (attention is its own kernel: its KV time adds to the GEMMs').

Terms under load (cost.py adds them to each iteration): `step_overhead_s` a step (scheduling,
launch, host work), `sequence_overhead_s` per sequence in the step (sampling, detokenising, the
per-request bookkeeping), `request_overhead_s` a request's front end (HTTP, tokenising: sim.run
adds it to its first token and its end, as a client measures them, beside the engine's work),
and any of perf.py's terms (e.g. gemm_efficiency: the engine's own kernels). They are fitted
by `shapecalc calibrate` on load tests (serve/loadcal.py), one set per engine version, never per
record. vllm keeps none: its outputs are today's exactly.
"""

from __future__ import annotations

import json
import math
from dataclasses import field
from pathlib import Path
from typing import Any

from ..lean import dataclass
from ..model.config import ShapecalcError
from ..plan.perf import NAMES

DATA = Path(__file__).with_name("engines.json")
ORDERS = ("decode-first", "prefill-first")
CAPACITY = ("evict", "no-evict")
ATTENTION = ("overlapped", "separate")
KV_MEMORY = ("of-total", "of-free")
LOAD_TERMS = ("step_overhead_s", "sequence_overhead_s", "request_overhead_s")
TERMS = LOAD_TERMS + NAMES
DEFAULT = "vllm"


@dataclass(frozen=True)
class Profile:
    name: str
    version: str | None
    engine: str
    order: str
    capacity: str
    attention: str
    prefix_caching: bool
    defaults: dict[str, int]
    follows: str
    terms: dict[str, float] = field(default_factory=dict)
    kv_memory: str = "of-total"  # --utilization of the GPU's memory, or of what weights leave

    @property
    def label(self) -> str:
        return self.name if self.version is None else f"{self.name}@{self.version}"

    @property
    def load(self) -> tuple[float, float, bool]:
        """(step_overhead_s, sequence_overhead_s, attention separate) for cost.py."""
        return (self.terms.get("step_overhead_s", 0.0), self.terms.get("sequence_overhead_s",
                0.0), self.attention == "separate")

    @property
    def perf(self) -> dict[str, float]:
        """The perf.py terms this engine's kernels override."""
        return {k: v for k, v in self.terms.items() if k in NAMES}

    def doc(self) -> dict[str, Any]:
        """The profile as `--json` shows it (serve's `engine`)."""
        return {"profile": self.label, "name": self.name, "version": self.version,
                "engine": self.engine, "order": self.order, "capacity": self.capacity,
                "attention": self.attention, "prefix_caching": self.prefix_caching,
                "kv_memory": self.kv_memory,
                "defaults": dict(self.defaults), "terms": dict(self.terms)}


def check_terms(terms: Any, where: str) -> dict[str, float]:
    """A profile's terms: known names, finite numbers ≥ 0 (efficiencies in (0, 1])."""
    if not isinstance(terms, dict):
        raise ShapecalcError("engine", f"{where}: terms must be an object")
    out: dict[str, float] = {}
    for k, v in terms.items():
        if k not in TERMS:
            raise ShapecalcError("engine", f"{where}: unknown term {k!r} (one of "
                                 f"{', '.join(TERMS)})")
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
                or v < 0 or (k.endswith("efficiency") and not 0 < v <= 1):
            raise ShapecalcError("engine", f"{where}: {k} must be a finite number ≥ 0 "
                                 f"(an efficiency in (0, 1]), got {v!r}")
        out[k] = float(v)
    return out


def table(path: Path = DATA) -> dict[str, Any]:
    # the package's own file (not a user's input: json.loads, as presets are read)
    doc: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))["profiles"]
    return doc


def profile(text: str | None, path: Path = DATA) -> Profile:
    """`vllm`, `sglang`, `trtllm`, `trtllm@mlperf-v4.1`: the profile, its version's terms over
    its own. None: vllm (today's behaviour)."""
    text = DEFAULT if text is None else str(text).strip().lower()
    name, at, version = text.partition("@")
    profiles = table(path)
    if name not in profiles:
        raise ShapecalcError("engine", f"{text!r} is not one of {', '.join(profiles)} "
                             "(NAME or NAME@VERSION)")
    p = dict(profiles[name])
    if "base" in p:
        p = {**profiles[p["base"]], **{k: v for k, v in p.items() if k != "base"}}
    versions = p.get("versions", {})
    if at and version not in versions:
        known = ", ".join(f"{name}@{v}" for v in versions) or "none"
        raise ShapecalcError("engine", f"{text!r}: {name} has no calibrated version "
                             f"{version!r} (versions: {known})")
    chosen = version if at else p.get("default_version")
    terms = check_terms(p.get("terms", {}), name)
    engine = p["engine"]
    if chosen is not None:
        v = versions[chosen]
        terms = {**terms, **check_terms(v.get("terms", {}), f"{name}@{chosen}")}
        engine = v.get("engine", engine)
    for key, allowed in (("order", ORDERS), ("capacity", CAPACITY), ("attention", ATTENTION)):
        if p[key] not in allowed:
            raise ShapecalcError("engine", f"{name}: {key} {p[key]!r} is not one of "
                                 f"{', '.join(allowed)}")
    if p.get("kv_memory", "of-total") not in KV_MEMORY:
        raise ShapecalcError("engine", f"{name}: kv_memory {p['kv_memory']!r} is not one of "
                             f"{', '.join(KV_MEMORY)}")
    return Profile(name, chosen, engine, p["order"], p["capacity"], p["attention"],
                   bool(p["prefix_caching"]), dict(p["defaults"]), p["follows"], terms,
                   p.get("kv_memory", "of-total"))


def with_terms(path: Path, fitted: dict[str, dict[str, float]]) -> str:
    """The data file with each `NAME@VERSION`'s fitted terms written in (calibrate
    --write-engines)."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    for label, terms in fitted.items():
        name, _, version = label.partition("@")
        p = doc["profiles"][name]
        p = doc["profiles"][p["base"]] if "base" in p else p  # its versions are its base's
        (p["versions"][version] if version else p)["terms"] = {
            k: terms[k] for k in sorted(terms)}
    return json.dumps(doc, indent=1, ensure_ascii=False) + "\n"
