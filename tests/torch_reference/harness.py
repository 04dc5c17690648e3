#!/usr/bin/env python3
"""Measure the PyTorch reference data of shapecalc's tests: one harness, cases per family.

Run by hand (the tests read the JSON files; their live tests call `measure_case`):

    pip install 'shapecalc[reference]'        # torch==2.13.0, transformers==5.24.0
    python tests/torch_reference/harness.py [FAMILY ...] [--out PATH]

FAMILY is one of families/ (flops alibi classic gemma llama4 mla moe, and against; all when none
given); each writes its tests/data/*_reference.json. A family is data (families/<name>.py): its
configs, B and T, notes, how its models are built, which extra measurements it takes, its record
layout. Every
case is measured alike: a tiny model from its config with random weights (torch.manual_seed(0),
float32, eager attention, CPU, eval, no_grad), FLOPs with FlopCounterMode over a prefill of B×T
(all logits), the same with logits_to_keep=1, and one decode step on the cache of a prefill,
the cache's bytes, and the parameters (the built model's and the meta device's). The counting is
shapecalc.reference.measure's, the code `shapecalc verify --against transformers` runs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import traceback
from collections.abc import Callable
from typing import Any

import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, REPO_ROOT)  # this checkout's shapecalc, whatever is installed

from families import FAMILIES  # noqa: E402
from families.family import Family  # noqa: E402

from shapecalc.reference.measure import (  # noqa: E402
    cache_bytes,
    cache_layers,
    checkpoint_params,
    count,
    forward_steps,
    meta_params,
    n_params,
    natural,
    rotary_dim,
)

HF_DIR = os.path.join(REPO_ROOT, "tests", "data", "hf")
ROUTER_CLASSES = ("Router",)  # MixtralTopKRouter, Qwen2MoeTopKRouter, ..., GptOssTopKRouter
# what a family's `probes` may ask for, beyond what every case measures
PROBES = {
    "redraw_routers": "every router's weight (and bias) redrawn from N(0, 1) (randomize_routers)",
    "routing": "the routers' top-k of each forward (RoutingLog), and each MoE layer's expert "
               "FLOPs checked against 2·assignments·3·D·Dff_e (expert_check)",
    "experts_implementations": "the prefill again under batched_mm and grouped_mm",
    "cache_after_decode": "the cache's bytes after the decode step too",
    "decode_is_full": "the decode's logits equal the last position of a forward over T+1 tokens",
}


# -- config.json -----------------------------------------------------------------------------------
def _jsonable(obj: Any) -> bool:
    try:
        json.dumps(obj)
        return True
    except (TypeError, ValueError):
        return False


def config_to_json_dict(cfg: Any) -> dict[str, Any]:
    """Complete, re-readable config.json dict: cfg.to_dict() minus non-serialisable entries."""
    out = {k: v for k, v in cfg.to_dict().items() if _jsonable(v)}
    out["model_type"] = cfg.model_type
    for k in ("_attn_implementation_autoset", "_name_or_path"):  # runtime keys
        out.pop(k, None)
    return out


def check_roundtrip(cfg: Any, d: dict[str, Any]) -> None:
    """Save d as config.json, re-read it with AutoConfig, and compare the key sizes."""
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "config.json"), "w") as f:
            json.dump(d, f)
        cfg2 = AutoConfig.from_pretrained(tmp)
    assert cfg2.model_type == cfg.model_type
    a = {k: v for k, v in cfg.to_dict().items() if _jsonable(v)}
    b = {k: v for k, v in cfg2.to_dict().items() if _jsonable(v)}
    for k in ("_attn_implementation_autoset", "transformers_version", "_name_or_path"):
        a.pop(k, None)
        b.pop(k, None)
    diff = {k for k in set(a) | set(b) if a.get(k) != b.get(k)}
    if diff:
        raise AssertionError(f"config round-trip mismatch on keys {sorted(diff)}")


# -- routing ---------------------------------------------------------------------------------------
def _is_router(mod: torch.nn.Module) -> bool:
    return any(c in type(mod).__name__ for c in ROUTER_CLASSES)


class RoutingLog:
    """Forward hooks on the routers that keep the chosen expert indices of each call."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.calls: dict[str, list[torch.Tensor]] = {}
        self.num_experts: dict[str, int] = {}
        for name, mod in model.named_modules():
            if _is_router(mod):
                mod.register_forward_hook(self._hook(name))

    def _hook(self, name: str) -> Callable[..., None]:
        def hook(mod: Any, args: Any, out: Any) -> None:
            self.calls.setdefault(name, []).append(out[2].detach().clone())
            self.num_experts[name] = mod.num_experts

        return hook

    def take(self) -> dict[str, Any]:
        """Routing of the calls since the last take, per router: assignments, experts hit, loads."""
        out = {}
        for name, calls in self.calls.items():
            (idx,) = calls  # one call per forward
            loads = torch.bincount(idx.reshape(-1), minlength=self.num_experts[name]).tolist()
            out[name.removesuffix(".gate").removesuffix(".router")] = {
                "tokens": int(idx.shape[0]), "top_k": int(idx.shape[1]),
                "assignments": int(idx.numel()), "experts_hit": int(sum(1 for n in loads if n)),
                "tokens_per_expert": loads,
            }
        self.calls = {}
        return dict(sorted(out.items(), key=lambda kv: natural(kv[0])))


def randomize_routers(model: torch.nn.Module, seed: int = 1) -> None:
    """Redraw every router weight (and bias) from N(0, 1): random, token-dependent routing that
    does not rest on transformers' initialisation (5.24 draws them with std 0.02)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, mod in model.named_modules():
            if _is_router(mod):
                for p in mod.parameters(recurse=False):
                    p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype))


def expert_check(cfg: Any, parts: dict[str, int], routing: dict[str, Any]) -> dict[str, int]:
    """Each MoE layer's measured expert FLOPs against 2 * assignments * 3 * D * Dff_e."""
    dff = getattr(cfg, "moe_intermediate_size", None) or cfg.intermediate_size
    out = {}
    for layer, r in routing.items():
        got = parts.get(f"{layer}.experts", 0)
        want = 2 * r["assignments"] * 3 * cfg.hidden_size * dff
        assert got == want, (layer, got, want)
        out[layer] = got
    return out


# -- one case --------------------------------------------------------------------------------------
def _steps(model: Any, fam: Family, batch: int, seq: int, prefix: str) -> dict[str, Any]:
    """One pass of the counted forwards (forward_steps) and the family's probes on them, keyed
    by quantity ('<prefix>prefill_flops', …)."""
    log = RoutingLog(model) if "routing" in fam.probes else None
    routing: dict[str, Any] = {}

    def after(step: str) -> None:
        got = log.take() if log is not None else None
        if step == "prefill_last":
            assert got == routing.get("prefill"), "same tokens, same routing"
        elif step in ("prefill", "decode"):
            routing[step] = got

    res = forward_steps(model, model.config.vocab_size, batch, seq, at_cache=cache_layers,
                        after=after)
    p, m = prefix, {}
    for step in ("prefill", "prefill_last", "decode"):
        c = res[step]
        m[f"{p}{step}_flops"], m[f"{p}{step}_ops"], m[f"{p}{step}_modules"] = (
            (c.total, c.ops, c.modules) if c is not None else (None, None, None))
    m[f"{p}kv_cache_bytes"], m[f"{p}kv_cache_shapes"] = res["kv"]
    m[f"{p}kv_cache_bytes_window_W"] = res["kv_window"]
    m[f"{p}kv_cache_layers"] = res["at_cache"]
    m[f"{p}out"] = res["out"]
    if "cache_after_decode" in fam.probes:
        m[f"{p}kv_cache_bytes_decode"] = cache_bytes(res["cache"])[0]
    if "decode_is_full" in fam.probes:
        with torch.no_grad():  # the cache really served the decode
            full = model(torch.cat([res["ids"], res["next_ids"]], dim=1), use_cache=False)
        assert torch.allclose(res["out"]["d"].logits[:, -1], full.logits[:, -1], atol=1e-4)
    cap = getattr(model.config, "final_logit_softcapping", None)
    if cap:
        assert res["out"]["p"].logits.abs().max() < cap
    moe = any(_is_router(mod) for mod in model.modules())
    if log is not None and moe:
        m["routing"] = routing
        m["expert_flops"] = {ph: expert_check(model.config, m[f"{p}{ph}_modules"], routing[ph])
                             for ph in ("prefill", "decode")}
    if "experts_implementations" in fam.probes and moe:
        impl = fam.build["experts_implementation"]
        check: dict[str, Any] = {impl: m["prefill_flops"]}
        ids = res["ids"]
        for other in ("batched_mm", "grouped_mm"):
            try:
                model.set_experts_implementation(other)
                with torch.no_grad():
                    check[other] = count(lambda: model(ids, use_cache=False)).total
            except Exception as exc:  # record why an implementation cannot run here
                check[other] = f"{type(exc).__name__}: {exc}"
            if log is not None:
                log.take()
        model.set_experts_implementation(impl)
        m["prefill_flops_by_experts_implementation"] = check
    return m


def measure_case(family: str | Family, name: str, model_type: str,
                 kwargs: dict[str, Any]) -> dict[str, Any]:
    """One case of a family, as its record (the family's layout)."""
    fam = FAMILIES[family] if isinstance(family, str) else family
    B, T = fam.batch, fam.seq_of(name)
    cfg = AutoConfig.for_model(model_type, **kwargs)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager",
                                             dtype=torch.float32, **fam.build)
    model.eval()
    if "redraw_routers" in fam.probes:
        randomize_routers(model)
    cfg = model.config
    moe = any(_is_router(mod) for mod in model.modules())
    impl = fam.build.get("experts_implementation")
    if moe and impl:
        assert cfg._experts_implementation == impl, cfg._experts_implementation
    got: dict[str, Any] = {"name": name, "model_type": model_type, "batch": B, "seq": T,
                           "note": fam.notes.get(name, ""), "config": cfg,
                           "experts_implementation": impl if moe else None}
    first = None
    for tag, prepare in fam.variants or (("", None),):
        if prepare is not None:
            prepare(model)
        got.update(_steps(model, fam, B, T, f"{tag}_" if tag else ""))
        out = got[f"{tag}_out" if tag else "out"]
        if first is None:
            first = out
        else:  # a variant computes the same model as transformers' own forward
            for step in ("p", "d"):
                assert torch.allclose(first[step].logits, out[step].logits, atol=1e-4), step
    hf_config = config_to_json_dict(cfg)
    if impl:
        hf_config.pop("experts_implementation", None)
    check_roundtrip(cfg, hf_config)
    got["hf_config"] = hf_config
    got["params"] = n_params(model)
    got["params_meta"] = meta_params(AutoConfig.for_model(**hf_config))
    assert got["params_meta"] == got["params"], (got["params_meta"], got["params"])
    got["rotary_dim"] = rotary_dim(model)
    return layout(fam.record, got)


def layout(record: list[Any], got: dict[str, Any]) -> dict[str, Any]:
    """A record: each key of `record` from the measured quantities `got` (a key ending in '?'
    only where it was measured)."""
    out = {}
    for spec in record:
        key, src = (spec, spec) if isinstance(spec, str) else spec
        if key.endswith("?"):  # only where measured (MoE cases of a family with dense ones)
            key = src = key[:-1]
            if key not in got:
                continue
        out[key] = src(got) if callable(src) else got[src]
    return out


def published_counts(fam: Family) -> dict[str, Any]:
    """Each stored config.json of the family's `published` table on the meta device, next to
    its publisher's figures, in the family's layout."""
    out = {}
    for stem, meta in (fam.published or {}).items():
        path = os.path.join(HF_DIR, f"{stem}.json")
        with open(path) as f:
            raw = json.load(f)
        counts = checkpoint_params(raw)
        got = {"file": os.path.relpath(path, REPO_ROOT), "model_type": raw["model_type"],
               "architectures": raw.get("architectures"),
               "text_model_type": (raw.get("text_config") or {}).get("model_type"),
               **counts, **meta}
        out[stem] = layout(fam.published_record, got)
    return out


# -- the files -------------------------------------------------------------------------------------
def measure_all(cases: list[tuple[str, str, dict[str, Any]]],
                measure: Callable[[str, str, dict[str, Any]], dict[str, Any]],
                show: Callable[[dict[str, Any]], str]) -> tuple[list[Any], list[Any]]:
    """Each case measured; a failing one recorded in `errors`, the others still run."""
    done, errors = [], []
    for name, model_type, kwargs in cases:
        try:
            case = measure(name, model_type, kwargs)
            done.append(case)
            print(f"{name:28s} {show(case)}")
        except Exception as exc:  # record and go on: the file says which case failed and why
            traceback.print_exc()
            errors.append({"name": name, "model_type": model_type,
                           "error": f"{type(exc).__name__}: {exc}"})
    return done, errors


def write(out: str, how: str, done: list[Any], errors: list[Any], *,
          extra: dict[str, Any] | None = None,
          published: Callable[[], dict[str, Any]] | None = None) -> int:
    """One JSON document: versions, `how`, `extra`, cases, errors, published. 1 if a case failed."""
    doc = {"torch": torch.__version__, "transformers": transformers.__version__,
           "python": sys.version.split()[0], "how": how, **(extra or {}), "cases": done,
           "errors": errors}
    if published is not None:
        doc["published"] = published()
        for stem, p in doc["published"].items():
            print(f"{stem:28s} params_meta={p['params_meta']:,d}")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print(f"wrote {out} ({len(done)} cases, {len(errors)} errors)")
    return 1 if errors else 0


def _threads(n: int) -> None:
    torch.set_num_threads(max(1, min(n, os.cpu_count() or 1)))


def run(argv: list[str] | None, description: str, default_out: str, cases: Any,
        measure: Callable[..., dict[str, Any]], show: Callable[[dict[str, Any]], str], how: str,
        *, published: Callable[[], dict[str, Any]] | None = None,
        extra: dict[str, Any] | None = None, threads: int = 2) -> int:
    """The main of a script outside the families (measure_train*.py): measure `cases`, write."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--out", default=default_out)
    args = ap.parse_args(argv)
    _threads(threads)
    done, errors = measure_all(cases, measure, show)
    return write(args.out, how, done, errors, extra=extra, published=published)


def run_family(fam: Family, out: str | None = None) -> int:
    _threads(fam.threads)
    done, errors = measure_all(fam.cases, lambda *c: measure_case(fam, *c), fam.show)
    pub = (lambda: published_counts(fam)) if fam.published is not None else None
    return write(out or os.path.join(REPO_ROOT, fam.out), fam.how, done, errors,
                 extra=fam.extra, published=pub)


def run_against(out: str | None = None) -> int:
    """families/against.py: verify --against's measurement of tiny cases, from their families'
    JSON files (their hf_config)."""
    from families import against

    from shapecalc.reference.measure import measure_config

    _threads(2)
    records = {}
    for family, name in against.CASES:
        fam = FAMILIES[family]
        with open(os.path.join(REPO_ROOT, fam.out)) as f:
            case = next(c for c in json.load(f)["cases"] if c["name"] == name)
        rec = measure_config(case["hf_config"], case["batch"], case["seq"], "fp32")
        records[name] = {"family": family, "hf_config": case["hf_config"], "measured": rec}
        print(f"{name:28s} prefill={rec['prefill']['flops']:,d} "
              f"decode={rec['decode']['flops']:,d} params={rec['params']:,d}")
    doc = {"torch": torch.__version__, "transformers": transformers.__version__,
           "python": sys.version.split()[0], "how": against.HOW, "cases": records}
    path = out or os.path.join(REPO_ROOT, against.OUT)
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print(f"wrote {path} ({len(records)} cases)")
    return 0


def main(argv: list[str] | None = None) -> int:
    names_known = [*FAMILIES, "against"]
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("families", nargs="*", metavar="FAMILY", help=", ".join(names_known))
    ap.add_argument("--out", help="where to write (one FAMILY only; default its tests/data file)")
    args = ap.parse_args(argv)
    names = args.families or names_known  # against last: it reads the families' files
    unknown = [n for n in names if n not in names_known]
    if unknown or (args.out and len(names) != 1):
        ap.error(f"unknown family {unknown[0]!r}" if unknown else "--out takes one FAMILY")
    return max(run_against(args.out) if n == "against" else run_family(FAMILIES[n], args.out)
               for n in names)


if __name__ == "__main__":
    sys.exit(main())
