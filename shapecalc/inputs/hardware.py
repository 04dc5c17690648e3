"""Hardware profiles: one readable TOML file per GPU in presets/hardware/ (or a user folder).

A profile holds vendor datasheet values: memory in bytes, device-memory bandwidth, dense peak
FLOP/s per dtype, and the intra-node link bandwidth per direction. Every value can be overridden on
the command line (`--set-gpu hbm_bandwidth=3.0e12`, `--set-gpu peak_flops.fp8=1.5e15`,
`--set-gpu memory_bytes=96GiB`). Stdlib and pydantic-core only (records, as the model config
is): no pydantic BaseModel, no numpy, no rich.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from pydantic_core import ValidationError

from ..model.config import ShapecalcError, first_error
from ..model.record import Pos, PosFloat, Record, _doc, _req
from ..model.suggest import did_you_mean
from . import files
from .numbers import each_once, parse_number
from .sources import list_hardware

# dtypes a profile can give a peak for; a matmul runs in the activation dtype unless told otherwise
PEAK_DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8", "int8", "int4", "mxfp4", "nvfp4", "nf4")


class PeakFlops(Record):
    """Dense (no 2:4 sparsity) peak FLOP/s (OP/s for integers); absent: the chip has none."""

    fp32: PosFloat | None = _doc(None)
    tf32: PosFloat | None = _doc(None)
    bf16: PosFloat | None = _doc(None)
    fp16: PosFloat | None = _doc(None)
    fp8: PosFloat | None = _doc(None)
    int8: PosFloat | None = _doc(None)
    int4: PosFloat | None = _doc(None)
    mxfp4: PosFloat | None = _doc(None, "OCP MXFP4 GEMMs (Blackwell's fp4 tensor cores)")
    nvfp4: PosFloat | None = _doc(None, "NVFP4 GEMMs (Blackwell's fp4 tensor cores)")
    nf4: PosFloat | None = _doc(None, "no GPU multiplies NF4: bitsandbytes dequantises it first")


class PerfTerms(Record):
    """The expected-time model's terms for this GPU (plan/perf.py); absent: the calibrated
    defaults. `shapecalc calibrate` writes this table."""

    gemm_efficiency: PosFloat | None = _doc(None, "fraction of peak FLOP/s in large GEMMs")
    gemm_half_tokens: float | None = _doc(None, "GEMM rows at which half of that is reached")
    memory_efficiency: PosFloat | None = _doc(None, "fraction of HBM bandwidth weights reach")
    attention_efficiency: PosFloat | None = _doc(None, "fraction of HBM bandwidth KV reads reach")
    layer_overhead_s: float | None = _doc(None, "seconds per layer per decode step")
    prefill_layer_overhead_s: float | None = _doc(None, "seconds per layer per prefill step")
    allreduce_latency_s: float | None = _doc(None, "seconds per all-reduce (α)")
    link_efficiency: PosFloat | None = _doc(None, "fraction of link bandwidth reached")


# the range a term may take (README, Expected times): efficiencies are fractions; a GEMM reaches
# half its efficiency at a step of at most a million tokens; a fixed cost is at most a second
# (the calibrated ones are tens of µs). Beyond, a value is a typo, not a GPU.
LIMITS = {"gemm_half_tokens": (0.0, 1e6, "tokens"), "layer_overhead_s": (0.0, 1.0, "s"),
          "prefill_layer_overhead_s": (0.0, 1.0, "s"), "allreduce_latency_s": (0.0, 1.0, "s")}


def check_term(name: str, v: Any) -> None:
    """A term's value: a finite number in its range (LIMITS; efficiencies in (0, 1])."""
    if isinstance(v, bool) or not (isinstance(v, (int, float)) and math.isfinite(v)):
        raise ShapecalcError(f"perf.{name}", f"must be a finite number, got {v}")
    if name.endswith("efficiency"):
        if not 0 < v <= 1:
            raise ShapecalcError(f"perf.{name}", f"must be in (0, 1], got {v}")
        return
    lo, hi, unit = LIMITS[name]
    if not lo <= v <= hi:
        raise ShapecalcError(f"perf.{name}", f"must be in [{lo:g}, {hi:g}] {unit}, got {v:g}")



class GPU(Record):
    """A GPU profile: datasheet values (see presets/hardware/)."""

    name: str = _req("the profile's name")
    vendor: str = _doc("")
    source: str = _req("the vendor datasheet the values come from")
    memory: str = _doc("", "the memory as the datasheet names it, e.g. '80 GB HBM3'")
    memory_bytes: Pos = _req("device memory in bytes, as the driver reports")
    hbm_bandwidth: PosFloat = _req("device memory bandwidth, bytes/s")
    link: str = _doc("", "the intra-node link, e.g. 'NVLink 4'")
    link_bandwidth: PosFloat = _req("scale-up link (NVLink, xGMI), bytes/s per GPU per direction")
    # the topology (plan/topology.py prices collectives by where their ranks sit)
    gpus_per_node: Pos = _doc(8, "GPUs in one node (server): 8 on HGX/DGX")
    scale_up_domain: Pos | None = _doc(
        None, "GPUs the scale-up link joins (absent: gpus_per_node; 72 on GB200 NVL72)")
    scale_up_latency_s: float = _doc(2e-6, "seconds a message takes to start on the scale-up link")
    network: str = _doc("", "the scale-out network, e.g. '8x ConnectX-7 400 Gb/s InfiniBand'")
    scale_out_bandwidth: PosFloat = _doc(
        50e9, "network bandwidth between nodes, bytes/s per GPU per direction (400 Gb/s = 50e9)")
    scale_out_latency_s: float = _doc(5e-6, "seconds a message takes to start across nodes")
    peak_flops: PeakFlops = _req("dense peak FLOP/s per dtype")
    perf: PerfTerms | None = _doc(None, "the expected-time model's terms (plan/perf.py)")
    price_per_gpu_hour: PosFloat | None = _doc(
        None, "default on-demand $ per GPU-hour (--price overrides; absent: none)")
    price_source: str = _doc("", "the public price page price_per_gpu_hour is from, dated")

    def peak(self, dtype: str) -> float | None:
        return getattr(self.peak_flops, dtype, None)

    def _check(self) -> None:
        if not self.name.strip():
            raise ShapecalcError("gpu.name", "is empty: a profile needs a name")
        for term, v in (self.perf.model_dump() if self.perf else {}).items():
            if v is not None:  # at load, whether or not a command uses the term
                check_term(term, v)
        # rates below one unit a second make times overflow to inf (JSON has no inf), and no
        # GPU is that slow: 1e-300 B/s is a typo
        domain = self.scale_up_domain or self.gpus_per_node
        if domain % self.gpus_per_node and self.gpus_per_node % domain:
            raise ShapecalcError("gpu.scale_up_domain", f"{domain} GPUs neither divide nor are a "
                                 f"multiple of a node's {self.gpus_per_node}")
        for name in ("scale_up_latency_s", "scale_out_latency_s"):
            v = getattr(self, name)
            if not 0 <= v <= 1:  # a second to start a message is a typo, not a network
                raise ShapecalcError(f"gpu.{name}", f"must be in [0, 1] s, got {v:g}")
        rates = {"hbm_bandwidth": self.hbm_bandwidth, "link_bandwidth": self.link_bandwidth,
                 "scale_out_bandwidth": self.scale_out_bandwidth,
                 **{f"peak_flops.{d}": self.peak(d) for d in PEAK_DTYPES}}
        for name, v in rates.items():
            if v is not None and v < 1:
                raise ShapecalcError(f"gpu.{name}", f"{v:g} is below 1 a second; give it per "
                                     "second (e.g. 3.35e12, 3.35TB/s)")


def list_gpus(extra: list[Path] | None = None) -> dict[str, Path]:
    return list_hardware(extra)


def _read(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = files.loads(files.read_text(path, "gpu"), "TOML", path, "gpu")
    return data


def load_gpu(name: str, extra: list[Path] | None = None, sets: list[str] | None = None) -> GPU:
    """A profile by name (case-insensitive) or by path to a .toml file, with overrides."""
    path = Path(name)
    if path.suffix.lower() == ".toml" and files.path_is(path.is_file):
        data = _read(path)
    else:
        known = list_gpus(extra)
        match = known.get(name) or {k.lower(): v for k, v in known.items()}.get(name.lower())
        if match is None:
            raise ShapecalcError(
                "gpu", f"unknown GPU {name!r}{did_you_mean(name, known)}; known: "
                f"{', '.join(sorted(known)) or '(none)'}"
            )
        data = _read(match)
    quoted = GPU.quoted_number(data)
    if quoted:  # a file's number is written as one: lax validation would read "3e12" as 3e12
        raise ShapecalcError(f"gpu.{quoted}", "must be a number, not a string")
    data.setdefault("name", files.escape_controls(path.stem))
    each_once(sets, "set-gpu")
    for item in sets or []:
        _override(data, item)
    try:
        return GPU.model_validate(data)
    except ValidationError as err:
        e = first_error(err)
        raise ShapecalcError(f"gpu.{e.field}", e.reason) from None


def _override(data: dict[str, Any], item: str) -> None:
    key, sep, text = item.partition("=")
    key, text = key.strip(), text.strip()
    if not sep or not key:
        raise ShapecalcError("set-gpu", f"expected field=value, got {item!r}")
    parts = key.split(".")
    tables = {"peak_flops": PEAK_DTYPES, "perf": tuple(PerfTerms.field_info())}
    if parts[0] not in GPU.field_info() or (
        len(parts) == 2 and parts[1] not in tables.get(parts[0], ())
    ) or len(parts) > 2:
        fields = [*(f for f in GPU.field_info() if f not in tables),
                  *(f"peak_flops.{d}" for d in PEAK_DTYPES),
                  *(f"perf.{d}" for d in tables["perf"])]
        raise ShapecalcError("set-gpu", f"unknown field {key!r}; known: {', '.join(fields)}")
    if len(parts) == 1 and parts[0] in tables:
        raise ShapecalcError(
            "set-gpu", "set one value: peak_flops.bf16=989e12, perf.layer_overhead_s=4e-6")
    value: Any = text
    if parts[0] == "perf":  # a plain number in the term's range (seconds, fractions, tokens)
        value = parse_number(text, "set-gpu")
        check_term(parts[1], value)
    elif parts[0] not in ("name", "vendor", "source", "memory", "link", "network",
                              "price_source"):
        value = parse_quantity(text, "set-gpu", FIELD_UNITS.get(parts[0], ()), key)
        if parts[0] in ("memory_bytes", "gpus_per_node", "scale_up_domain"):
            if value != int(value):
                raise ShapecalcError("set-gpu", f"{parts[0]} must be a whole number, got {text!r}")
            value = int(value)
    if len(parts) == 2:
        table = dict(data.get(parts[0]) or {})
        table[parts[1]] = value
        data[parts[0]] = table
    else:
        data[parts[0]] = value


_UNITS = {"": 1, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15,
          "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50}
_QTY = re.compile(
    r"^\s*([+-]?[0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*(Ki|Mi|Gi|Ti|Pi|k|K|M|G|T|P)?"
    r"\s*(B/s|B|FLOP/s|FLOPS|OP/s|OPS|/s|s)?\s*$"
)


# the units each field may be written in (a number alone is in that unit): memory_bytes=80GiB/s
# is a bandwidth given for a size, refused; a field not listed takes a plain number
FIELD_UNITS = {"memory_bytes": ("B",), "hbm_bandwidth": ("B/s", "/s"),
               "link_bandwidth": ("B/s", "/s"), "scale_out_bandwidth": ("B/s", "/s"),
               "gpus_per_node": (), "scale_up_domain": (),
               "scale_up_latency_s": ("s",), "scale_out_latency_s": ("s",),
               "peak_flops": ("FLOP/s", "FLOPS", "OP/s", "OPS", "/s")}


def parse_quantity(text: str, field: str, units: tuple[str, ...] | None = None,
                   key: str = "this field") -> float:
    """'3.35e12', '3.35T', '3.35TB/s', '80GiB', '989.5 TFLOP/s' → a float (binary Ki/Mi/Gi);
    `units`: the unit suffixes the field accepts (None: any)."""
    m = _QTY.match(text)
    if not m:
        raise ShapecalcError(field, f"{text!r} is not a number (e.g. 3.35e12, 3.35TB/s, 80GiB)")
    if units is not None and m.group(3) and m.group(3) not in units:
        give = " or ".join(units) + ", or " if units else ""
        raise ShapecalcError(field, f"{text!r}: {m.group(3)} is not a unit of {key} "
                             f"(give {give}a plain number)")
    value = float(m.group(1)) * _UNITS[m.group(2) or ""]
    if not math.isfinite(value):
        raise ShapecalcError(field, f"{text!r} is too large for a number")
    if value <= 0:
        raise ShapecalcError(field, f"{text!r} must be positive")
    return value
