"""The inputs of the planning commands: cases (`NAME@field=value,…`), grids of values
(`1..256x2`), and the closed form of each model, kept for the process."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import field
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..costs.closed import ClosedForm
from ..inputs import files, sources
from ..inputs.numbers import pos_int
from ..lean import dataclass
from ..model.config import DTYPE_BITS, ModelConfig, ShapecalcError, Workload, check
from ..model.quant import source_fields, weight_format
from ..model.quantization import Quantization
from ..model.suggest import canonical_dtype, did_you_mean, did_you_mean_dtype

WORKLOAD_FIELDS = tuple(Workload.field_info())

MAX_AXIS = 10_000_000


def parse_int_grid(text: str, field: str) -> list[int]:
    """`1..256x2` (×2 from 1 to 256), `1..64+8` (steps of 8), `1..8` (every integer),
    `512,2048,8192`, and mixtures (`1,2,64..256x2`). Order kept, duplicates dropped."""
    out: list[int] = []
    for part in (p.strip() for p in str(text).split(",")):
        if not part:
            raise ShapecalcError(field, f"empty item in {text!r}")
        if ".." not in part:
            out.append(pos_int(part, field, text))
            continue
        a, _, rest = part.partition("..")
        mult = step = None
        if "x" in rest:
            rest, _, f = rest.partition("x")
            mult = pos_int(f, field, text)
            if mult < 2:
                raise ShapecalcError(field, f"factor x{mult} in {part!r} must be ≥ 2")
        elif "+" in rest:
            rest, _, st = rest.partition("+")
            step = pos_int(st, field, text)
        lo, hi = pos_int(a, field, text), pos_int(rest, field, text)
        if hi < lo:
            raise ShapecalcError(field, f"empty range {part!r}: {hi} < {lo}")
        if mult:
            x = lo
            while x <= hi:
                out.append(x)
                x *= mult
        else:
            step = step or 1
            if (hi - lo) // step + 1 > MAX_AXIS:
                raise ShapecalcError(field, f"{part!r} has more than {MAX_AXIS:,} values")
            out.extend(range(lo, hi + 1, step))
    seen: set[int] = set()
    return [x for x in out if not (x in seen or seen.add(x))]  # type: ignore[func-returns-value]


def parse_str_grid(text: str, field: str, allowed: Iterable[str],
                   canon: Callable[[str], str] | None = None) -> list[str]:
    """`bf16,fp8`: each of `allowed` (after `canon`, e.g. the dtype aliases), order kept."""
    allowed = list(allowed)
    out: list[str] = []
    for part in (p.strip() for p in str(text).split(",")):
        part = canon(part) if canon else part
        if part not in allowed:
            raise ShapecalcError(field, f"{part!r} is not one of {', '.join(allowed)}"
                                 + (did_you_mean_dtype if canon else did_you_mean)(part, allowed))
        if part not in out:
            out.append(part)
    return out


@dataclass
class Case:
    label: str
    model: ModelConfig
    workload: dict[str, Any] = field(default_factory=dict)  # fields the case fixes
    given: frozenset[str] = frozenset()  # of those, the ones after its @ (else its file's)


def case_fields(case: Case, flags: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A case's workload fields under the command's, one rule for compare, sweep and fit: its
    file's [workload], then the flags (they win over it, as over --config's), then the fields
    after its @ (they win over the flags: `compare m m@tp=4 --tp 1,2,4,8` pins the second
    case's tp). Returns (all of them, the @ ones)."""
    at = {k: v for k, v in case.workload.items() if k in case.given}
    own = {k: v for k, v in case.workload.items() if k not in case.given}
    return {**own, **{k: v for k, v in flags.items() if v is not None}, **at}, at


def parse_case(text: str, presets_dir: list[Path] | None = None) -> Case:
    """`NAME[@field=value,…]`: NAME a preset, a .toml/.json config or an HF config.json;
    workload fields set the workload, model fields go through the same path as --set."""
    src, at, spec = text.rpartition("@")
    if not at or (files.path_is(Path(text).exists) and "=" not in spec):  # a file named …@…
        src, spec = text, ""
    elif not spec.strip():
        raise ShapecalcError("case", f"{text!r}: expected field=value after @")
    if not src.strip():
        raise ShapecalcError("case", f"{text!r}: expected NAME[@field=value,…]")
    src = src.strip()
    path = Path(src)
    looks_like_file = (path.suffix.lower() in (".toml", ".json") or "/" in src
                       or files.path_is(path.is_dir))
    workload: dict[str, Any] = {}
    given: set[str] = set()
    if looks_like_file:
        if not files.path_is(path.exists):
            raise ShapecalcError("case", f"{text!r}: file not found: {src}")
        if _is_hf(path):
            from ..inputs.hf import load_hf_config  # the readers load only for a config.json

            model = load_hf_config(path)
        else:
            model, workload = sources.load_config_file(path)
    else:
        model = sources.load_preset(src, presets_dir)
    sets: list[str] = []
    for item in (s.strip() for s in spec.split(",")) if spec else ():
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or not key or not value.strip():
            raise ShapecalcError("case", f"{text!r}: expected field=value, got {item!r}")
        if key in WORKLOAD_FIELDS:
            workload[key] = value.strip()
            given.add(key)
        elif key in ModelConfig.field_info():
            sets.append(f"{key}={value.strip()}")
        else:
            raise ShapecalcError("case", f"{text!r}: unknown field {key!r}")
    if sets:
        model = sources.apply_overrides(model, sets)
    workload = source_fields(model, workload)  # a quantized checkpoint's weights' dtype
    return Case(files.escape_controls(text), model, workload, frozenset(given))  # the label prints


def _is_hf(path: Path) -> bool:
    if files.path_is(path.is_dir):
        return True
    if path.suffix.lower() != ".json":
        return False
    try:
        data = files.read_json(path, "case")
    except ShapecalcError:
        return False  # load_config_file says what is wrong with it
    return isinstance(data, dict) and "model_type" in data


def closed_form_for(model: ModelConfig, wl: Workload) -> ClosedForm:
    """The closed form of a model under a workload's switches and its weights' format (a
    dtype the checkpoint's quantization does not store is refused: quant.weight_format); kept,
    so that its regimes are made once per process (a planner's loop calls sweep and fit many
    times)."""
    return _closed_form(model, wl.logits, wl.attention_flops, wl.padding_mask, wl.block_size,
                        wl.mla_form, weight_format(model, wl.dtype),
                        (wl.mixer_flops, wl.state_cache, wl.state_dtype), wl.selection)


@lru_cache(maxsize=64)
def _closed_form(model: ModelConfig, logits: str, attention_flops: str, padding_mask: bool,
                 block_size: int, mla_form: str | None, weights: Quantization | None,
                 mixers: tuple[str | None, str | None, str | None] = (None, None, None),
                 selection: str = "eager") -> ClosedForm:
    return ClosedForm(model, logits=logits, attention_flops=attention_flops,
                      padding_mask=padding_mask, block_size=block_size, mla_form=mla_form,
                      weights=weights, mixers=mixers, selection=selection)


def valid(model: ModelConfig, wl: Workload, **change: int) -> bool:
    """Whether `check` accepts the workload with `change` applied (a tp, pp, or seq)."""
    try:
        check(model, wl.model_copy(update=change))
    except ShapecalcError:
        return False
    return True


INT_AXES = ("batch", "seq", "tp", "pp")
STR_AXES = ("dtype", "kv_dtype")


def parse_axes(texts: dict[str, str | None]) -> dict[str, list[Any]]:
    """The grid axes compare and sweep expand over, from their texts (`1..256x2`, `bf16,fp8`);
    an axis whose text is None is not given."""
    axes: dict[str, list[Any]] = {}
    for name, text in texts.items():
        if text is None:
            continue
        if name in INT_AXES:
            axes[name] = parse_int_grid(text, name)
        else:
            axes[name] = parse_str_grid(text, name.replace("_", "-"), DTYPE_BITS,
                                        lambda d: canonical_dtype(d, DTYPE_BITS))
    return axes
