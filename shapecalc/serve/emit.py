"""`serve --emit vllm|sglang|trtllm|dynamo`: the plan (as given, or as --find-gpus found it;
--find-rate finds a rate, not a deployment: it is refused with --emit, as are --ep-mode and
--redundant-experts, which no emitted flag sets) as the launch command the engine takes. Every
flag name is the engine's own, checked against its argument parser or its documentation at the
commit named (tests/data/engine_flags.json holds the names, tests/test_serve_emit.py checks
every emitted flag against them):

- vLLM, vllm/engine/arg_utils.py (EngineArgs.add_cli_args) at 99d7eb5d6a51:
  `--tensor-parallel-size`, `--pipeline-parallel-size`, `--data-parallel-size`,
  `--enable-expert-parallel`, `--max-num-batched-tokens`, `--max-num-seqs`,
  `--gpu-memory-utilization`, `--kv-cache-dtype`, `--block-size`, `--enable-prefix-caching`
  (a BooleanOptionalAction: `--no-enable-prefix-caching`), `--dtype`, `--quantization`,
  `--speculative-config` (JSON of vllm/config/speculative.py's SpeculativeConfig: `method`
  draft_model | eagle3 | mtp, `model`, `num_speculative_tokens`); `vllm serve MODEL`.
- SGLang, docs/advanced_features/server_arguments.md at 004813e1dd46 (its tables of
  server_args.py): `--model-path`, `--tp-size`, `--pp-size`, `--dp-size`, `--ep-size`,
  `--enable-dp-attention` ("data parallelism for attention and tensor parallelism for FFN":
  tp-size every GPU, dp-size of them per attention replica), `--chunked-prefill-size`,
  `--max-running-requests`,
  `--mem-fraction-static`, `--kv-cache-dtype` (auto, fp8_e4m3, …), `--page-size`,
  `--disable-radix-cache`, `--dtype`, `--quantization`, `--speculative-algorithm` (EAGLE3,
  STANDALONE, NEXTN), `--speculative-draft-model-path`, `--speculative-num-steps`,
  `--speculative-eagle-topk`, `--speculative-num-draft-tokens`; `python -m sglang.launch_server`.
- TensorRT-LLM, tensorrt_llm/commands/serve.py (click options) at 4c05a74891e4: `trtllm-serve
  MODEL --backend pytorch --tp_size --pp_size --ep_size --max_batch_size --max_num_tokens
  --kv_cache_free_gpu_memory_fraction --extra_llm_api_options FILE`; the file is the LLM API's
  YAML (tensorrt_llm/llmapi/llm_args.py: `kv_cache_config` {dtype, enable_block_reuse,
  tokens_per_block}, `enable_attention_dp`, `speculative_config` {decoding_type Eagle3 |
  DraftTarget | MTP, max_draft_len, speculative_model, num_nextn_predict_layers}).
- Dynamo, components/src/dynamo/vllm/args.py at b6d5e48722e4: a `python -m dynamo.vllm` worker
  takes vLLM's engine arguments (AsyncEngineArgs.add_cli_args) and `--model`; `python -m
  dynamo.frontend` routes to the workers. One aggregated worker a replica (a disaggregated
  plan's prefill and decode workers: serve/emit_pd.py).

A value the engine cannot take is refused naming the flag that set it (exit 2): weights in a
dtype its flags do not select (int4, …: a quantized checkpoint names its own format), a KV dtype
it has no name for, an ep that is not a multiple of tp (attention runs in ep/tp data-parallel
replicas of tp).
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from ..model.config import ShapecalcError
from ..model.suggest import not_one_of

ENGINES = ("vllm", "sglang", "trtllm", "dynamo")
TORCH_DTYPE = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}




def _cmd(head: list[str], args: list[tuple[str, Any]]) -> str:
    """One command, a flag a line: `--flag value` (value None: the flag alone)."""
    parts = [" ".join(head)]
    for flag, v in args:
        parts.append(flag if v is None else f"{flag} {shlex.quote(str(v))}")
    return " \\\n    ".join(parts)


def _check(engine: str, dep: dict[str, Any]) -> tuple[int, int]:
    """(dp, ep): attention's data-parallel replicas and the expert-parallel size."""
    if engine not in ENGINES:
        raise not_one_of("emit", engine, ENGINES)
    tp, ep = dep["tp"], dep["ep"]
    if ep > 1 and ep % tp:
        raise ShapecalcError("ep", f"--emit {engine}: ep={ep} is not a multiple of tp={tp} "
                             "(attention runs in ep/tp data-parallel replicas of tp)")
    return (ep // tp if ep > tp else 1), ep


def _weights(engine: str, dtype: str, names: dict[str, str]) -> list[tuple[str, Any]]:
    if dtype in TORCH_DTYPE:
        return [(names["dtype"], TORCH_DTYPE[dtype])]
    if dtype == "fp8" and "quantization" in names:
        return [(names["quantization"], "fp8")]
    raise ShapecalcError("dtype", f"--emit {engine} cannot select {dtype} weights by a flag "
                         "(a quantized checkpoint names its own format): serve its checkpoint")


def _kv(engine: str, kv: str, act: str, fp8: str) -> str:
    if kv == act and kv in TORCH_DTYPE:
        return "auto"
    if kv == "fp8":
        return fp8
    raise ShapecalcError("kv-dtype", f"--emit {engine} has no KV-cache dtype for {kv} beside "
                         f"{act} activations (auto or fp8)")


def vllm_args(doc: dict[str, Any], util: float, sp: Any, draft_ref: str | None
              ) -> list[tuple[str, Any]]:
    d = doc["deployment"]
    dp, ep = _check("vllm", d)
    args: list[tuple[str, Any]] = [("--tensor-parallel-size", d["tp"])]
    if d["pp"] > 1:
        args.append(("--pipeline-parallel-size", d["pp"]))
    if dp > 1:
        args.append(("--data-parallel-size", dp))
    if ep > 1:
        args.append(("--enable-expert-parallel", None))
    args += _weights("vllm", d["dtype"], {"dtype": "--dtype", "quantization": "--quantization"})
    args += [("--kv-cache-dtype", _kv("vllm", d["kv_dtype"], d["act_dtype"], "fp8")),
             ("--block-size", d["block_size"]),
             ("--max-num-batched-tokens", d["max_batched_tokens"]),
             ("--max-num-seqs", d["max_num_seqs"]),
             ("--gpu-memory-utilization", util),
             ("--enable-prefix-caching" if d["shared_prefix"] else "--no-enable-prefix-caching",
              None)]
    if sp is not None:
        method = {"draft": "draft_model", "eagle3": "eagle3", "mtp": "mtp"}[sp.spec.kind]
        cfg: dict[str, Any] = {"method": method, "num_speculative_tokens": sp.spec.k}
        if draft_ref is not None:
            cfg["model"] = draft_ref
        args.append(("--speculative-config", json.dumps(cfg, separators=(",", ":"))))
    return args


def sglang_args(doc: dict[str, Any], util: float, sp: Any, draft_ref: str | None
                ) -> list[tuple[str, Any]]:
    d = doc["deployment"]
    dp, ep = _check("sglang", d)
    # with DP attention SGLang's tp-size is every GPU of the replica, attention's tp-size / dp
    args: list[tuple[str, Any]] = [("--tp-size", d["tp"] * dp)]
    if d["pp"] > 1:
        args.append(("--pp-size", d["pp"]))
    if ep > 1:
        args.append(("--ep-size", ep))
    if dp > 1:
        args += [("--dp-size", dp), ("--enable-dp-attention", None)]
    args += _weights("sglang", d["dtype"], {"dtype": "--dtype", "quantization": "--quantization"})
    args += [("--kv-cache-dtype", _kv("sglang", d["kv_dtype"], d["act_dtype"], "fp8_e4m3")),
             ("--page-size", d["block_size"]),
             ("--chunked-prefill-size", d["max_batched_tokens"]),
             ("--max-running-requests", d["max_num_seqs"]),
             ("--mem-fraction-static", util)]
    if not d["shared_prefix"]:
        args.append(("--disable-radix-cache", None))
    if sp is not None:
        algo = {"draft": "STANDALONE", "eagle3": "EAGLE3", "mtp": "NEXTN"}[sp.spec.kind]
        args.append(("--speculative-algorithm", algo))
        if draft_ref is not None:
            args.append(("--speculative-draft-model-path", draft_ref))
        args += [("--speculative-num-steps", sp.spec.k), ("--speculative-eagle-topk", 1),
                 ("--speculative-num-draft-tokens", sp.spec.k + 1)]
    return args


def trtllm_yaml(doc: dict[str, Any], sp: Any, draft_ref: str | None) -> list[str]:
    """The --extra_llm_api_options file, line by line."""
    d = doc["deployment"]
    dp, _ = _check("trtllm", d)
    _weights("trtllm", d["dtype"], {"dtype": "dtype"})
    kv = _kv("trtllm", d["kv_dtype"], d["act_dtype"], "fp8")
    out = [f"dtype: {TORCH_DTYPE[d['dtype']]}", "kv_cache_config:", f"  dtype: {kv}",
           f"  tokens_per_block: {d['block_size']}",
           f"  enable_block_reuse: {'true' if d['shared_prefix'] else 'false'}"]
    if dp > 1:
        out.append("enable_attention_dp: true")
    if sp is not None:
        kind = {"draft": "DraftTarget", "eagle3": "Eagle3", "mtp": "MTP"}[sp.spec.kind]
        out += ["speculative_config:", f"  decoding_type: {kind}"]
        if sp.spec.kind == "mtp":
            out.append(f"  num_nextn_predict_layers: {sp.spec.k}")
        else:
            out += [f"  max_draft_len: {sp.spec.k}", f"  speculative_model: {draft_ref}"]
    return out


def trtllm_args(doc: dict[str, Any], kv_fraction: float) -> list[tuple[str, Any]]:
    d = doc["deployment"]
    dp, ep = _check("trtllm", d)
    args: list[tuple[str, Any]] = [("--backend", "pytorch"), ("--tp_size", d["tp"] * dp),
                                   ("--pp_size", d["pp"])]
    if ep > 1:
        args.append(("--ep_size", ep))
    return [*args, ("--max_batch_size", d["max_num_seqs"]),
            ("--max_num_tokens", d["max_batched_tokens"]),
            ("--kv_cache_free_gpu_memory_fraction", round(kv_fraction, 4)),
            ("--extra_llm_api_options", "extra-llm-api-config.yml")]


def launch(engine: str, doc: dict[str, Any], model_ref: str, util: float, sp: Any,
           draft_ref: str | None, kv_fraction: float) -> str:
    """The launch command(s) of `doc`'s deployment for `engine` (module doc). `kv_fraction`:
    the share of the memory left after the weights the KV cache takes (TensorRT-LLM's)."""
    d = doc["deployment"]
    n = d["replicas"]
    _check(engine, d)
    lines = [f"# {doc['model']} on {doc['gpu']}: {n} replica{'s' if n > 1 else ''} × "
             f"{d['gpus'] // n} GPU{'s' if d['gpus'] // n > 1 else ''} "
             f"({doc['deployment_is']}), shapecalc serve --emit {engine}"]
    if engine == "vllm":
        cmd = _cmd(["vllm", "serve", shlex.quote(model_ref)], vllm_args(doc, util, sp,
                                                                        draft_ref))
    elif engine == "sglang":
        cmd = _cmd(["python", "-m", "sglang.launch_server"],
                   [("--model-path", model_ref), *sglang_args(doc, util, sp, draft_ref)])
    elif engine == "trtllm":
        lines += ["cat > extra-llm-api-config.yml <<'EOF'", *trtllm_yaml(doc, sp, draft_ref),
                  "EOF"]
        cmd = _cmd(["trtllm-serve", shlex.quote(model_ref)], trtllm_args(doc, kv_fraction))
    else:
        per = d["gpus"] // n
        lines.append("python -m dynamo.frontend &")
        for r in range(n):
            gpus = ",".join(str(g) for g in range(r * per, (r + 1) * per))
            lines.append(_cmd([f"CUDA_VISIBLE_DEVICES={gpus}", "python", "-m", "dynamo.vllm"],
                              [("--model", model_ref), *vllm_args(doc, util, sp, draft_ref)])
                         + " &")
        return "\n".join(lines)
    if n > 1:
        lines.append(f"# one engine a replica: run {n} of these behind a "
                     f"{d['router']} router")
    lines.append(cmd)
    return "\n".join(lines)


def kv_fraction(dep: Any, doc: dict[str, Any]) -> float:
    """TensorRT-LLM's kv_cache_free_gpu_memory_fraction for the memory shapecalc plans: of the
    memory the weights leave a GPU, the share within --utilization: (u·M − W)/(M − W), W one
    rank's weights (its draft's too) at the plan's tp, pp and ep."""
    from ..plan.cases import closed_form_for

    d = doc["deployment"]
    wl = dep.wl.model_copy(update={"tp": d["tp"], "pp": d["pp"], "ep": d["ep"]})
    tot = closed_form_for(dep.model, wl).at(1, 1, "prefill", wl.tp, wl.pp, wl.dtype, wl.kv,
                                            wl.act)
    w = tot["weight_bytes_per_rank"]
    if wl.ep > 1:  # each GPU holds E/ep whole experts, not its tp share of every one
        w += tot["expert_weight_bytes"] // wl.ep - tot["expert_weight_bytes_per_rank"]
    spec = doc.get("speculative")
    if spec is not None:
        w += spec["draft_weight_bytes_per_rank"]
    m, u = dep.gpu.memory_bytes, dep.opts.utilization
    f = (u * m - w) / (m - w)
    if not 0 < f < 1:
        raise ShapecalcError("utilization", f"--emit trtllm: the weights ({w:,} bytes a GPU) "
                             f"leave no KV cache within {u:g} of {m:,} bytes")
    return f


def launch_text(engine: str, doc: dict[str, Any], dep: Any, sp: Any, model_src: Any,
                draft_src: Any) -> str:
    """--emit's output for a serve document: the model and draft as given (a preset's name, a
    config's path; an EAGLE-3 config's directory is its checkpoint)."""
    from pathlib import Path

    _check(engine, doc["deployment"])
    if doc["command"] == "find-gpus" and doc["find_gpus"]["plan"] is None:
        raise ShapecalcError("emit", "no explored deployment meets the SLO: no plan to emit")
    model_ref = str(model_src) if model_src is not None else doc["model"]
    draft_ref = None
    if sp is not None and sp.spec.kind != "mtp":
        draft_ref = str(Path(draft_src).parent) if sp.spec.kind == "eagle3" else str(draft_src)
    frac = kv_fraction(dep, doc) if engine == "trtllm" else 0.0
    return launch(engine, doc, model_ref, dep.opts.utilization, sp, draft_ref, frac)
