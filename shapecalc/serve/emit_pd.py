"""`serve --emit` of a disaggregated plan (--pd P:D, --find-pd, or --find-gpus' P:D plan): each
pool's instances as the engine runs them, each with its own layout (emit.py's flags of the pool's
tp, pp, ep and data-parallel attention, the token budget, speculation), GPUs numbered a node at a
time.

- vLLM: one `vllm serve` a replica with `--kv-transfer-config` naming the NixlConnector, the
  prefill instances `kv_role` kv_producer and the decode instances kv_consumer (vllm/config/
  kv_transfer.py KVTransferConfig at 007c643b4abb: `KVProducer = Literal["kv_producer",
  "kv_both"]`, `KVConsumer = Literal["kv_consumer", "kv_both"]`; the flag: vllm/engine/
  arg_utils.py at 99d7eb5d6a51, `vllm_group.add_argument("--kv-transfer-config", ...)`). vLLM
  routes no request itself: a proxy sends each to a prefill instance, then to a decode one.
- SGLang: one `sglang.launch_server` a replica with `--disaggregation-mode prefill|decode`,
  `--disaggregation-transfer-backend nixl` and its `--port`, then `sglang_router.launch_router
  --pd-disaggregation --prefill URL … --decode URL …` (sgl-project/sglang docs/
  advanced_features/pd_disaggregation.md at 08edc506b2da: "python -m sglang_router.launch_router
  --pd-disaggregation --prefill http://127.0.0.1:30000 --decode http://127.0.0.1:30001").
- Dynamo: `dynamo.frontend`, then a `dynamo.vllm` worker a replica, the prefill workers with
  `--is-prefill-worker`, the decode workers `--is-decode-worker` (components/src/dynamo/vllm/
  backend_args.py at 036f289b17f2: `add_negatable_bool_argument(g, flag_name=
  "--is-prefill-worker", …)`), each with vLLM's `--kv-transfer-config` of the NixlConnector,
  kv_role kv_both as Dynamo asks for it (components/src/dynamo/vllm/args.py at 000a36a7399a:
  "--kv-transfer-config '{\"kv_connector\":\"NixlConnector\",\"kv_role\":\"kv_both\"}'").
- TensorRT-LLM: a `trtllm-serve` context server a prefill replica and a generation server a
  decode replica, each with `--host`/`--port` and its own --extra_llm_api_options file (emit.py's
  YAML, plus `disable_overlap_scheduler: true` for context servers and
  `cache_transceiver_config: max_num_tokens`), then `trtllm-serve disaggregated -c
  disagg_config.yaml` over their URLs (NVIDIA/TensorRT-LLM examples/disaggregated/README.md at
  013971245ed5: "echo -e \"disable_overlap_scheduler: True\\ncache_transceiver_config:..."
  > context_extra-llm-api-config.yml", "trtllm-serve disaggregated -c disagg_config.yaml",
  and its hostname, port, backend, context_servers / generation_servers: num_instances, urls).
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from ..model.errors import plural
from .emit import _cmd, kv_fraction, sglang_args, trtllm_args, trtllm_yaml, vllm_args

SGLANG_PORT = 30000  # the first server's port (the docs' example), one more a server
TRTLLM_PORT = 8001  # TensorRT-LLM's example: the disaggregated server on 8000, servers after it
TRT_NAME = {"prefill": "context", "decode": "generation"}


def _kv(role: str) -> str:
    return json.dumps({"kv_connector": "NixlConnector", "kv_role": role}, separators=(",", ":"))


def _pool_doc(doc: dict[str, Any], side: str) -> dict[str, Any]:
    """The document with `deployment` one pool's: its tp, pp, ep, replicas and GPUs."""
    d = doc["deployment"]
    p = d["pd"][side]
    return {**doc, "deployment": {**d, **{k: p[k] for k in ("tp", "pp", "ep", "replicas",
                                                             "gpus")}}}


def _gpus(start: int, n: int, per_node: int) -> tuple[str, int]:
    """CUDA_VISIBLE_DEVICES of n GPUs from the start-th, a node at a time, and its node."""
    node = start // per_node
    if (start + n - 1) // per_node != node:  # a replica across nodes: every GPU of its nodes
        return ",".join(str(g) for g in range(min(n, per_node))), node
    return ",".join(str(g % per_node) for g in range(start, start + n)), node


def _trt_files(doc: dict[str, Any], sp: Any, draft_ref: str | None) -> list[str]:
    """Each pool's --extra_llm_api_options file (emit.trtllm_yaml and the disaggregated keys)."""
    out = []
    for side, name in TRT_NAME.items():
        extra = ["disable_overlap_scheduler: true"] if side == "prefill" else []
        out += [f"cat > {name}-extra-llm-api-config.yml <<'EOF'",
                *trtllm_yaml(_pool_doc(doc, side), sp, draft_ref), *extra,
                "cache_transceiver_config:",
                f"  max_num_tokens: {doc['deployment']['max_batched_tokens']}", "EOF"]
    return out


def _trt_config(urls: dict[str, list[str]]) -> list[str]:
    out = ["cat > disagg_config.yaml <<'EOF'", "hostname: localhost",
           f"port: {TRTLLM_PORT - 1}", "backend: pytorch"]
    for side, name in TRT_NAME.items():
        out += [f"{name}_servers:", f"  num_instances: {len(urls[side])}", "  urls:",
                *(f'    - "{u}"' for u in urls[side])]
    return [*out, "EOF", "trtllm-serve disaggregated -c disagg_config.yaml"]


def launch_pd(engine: str, doc: dict[str, Any], model_ref: str, util: float, sp: Any,
              draft_ref: str | None, per_node: int, dep: Any = None) -> str:
    d = doc["deployment"]
    pools = d["pd"]
    each = {k: plural(v["gpus"] // v["replicas"], "GPU") for k, v in pools.items()}
    lines = [f"# {doc['model']} on {doc['gpu']}: prefill {pools['prefill']['replicas']} × "
             f"{each['prefill']} + decode {pools['decode']['replicas']} × {each['decode']} = "
             f"{plural(d['gpus'], 'GPU')} ({doc['deployment_is']}), "
             f"shapecalc serve --emit {engine}"]
    if engine == "dynamo":
        lines.append("python -m dynamo.frontend &")
    if engine == "trtllm":
        lines += _trt_files(doc, sp, draft_ref)
    g, port = 0, SGLANG_PORT if engine == "sglang" else TRTLLM_PORT
    urls: dict[str, list[str]] = {"prefill": [], "decode": []}
    for side in ("prefill", "decode"):
        one = _pool_doc(doc, side)
        n = pools[side]["replicas"]
        per = pools[side]["gpus"] // n
        for _ in range(n):
            cvd, node = _gpus(g, per, per_node)
            g += per
            env = [f"CUDA_VISIBLE_DEVICES={cvd}"]
            if d["gpus"] > per_node:
                lines.append(f"# {side}, node {node}")
            if engine == "vllm":
                role = "kv_producer" if side == "prefill" else "kv_consumer"
                cmd = _cmd([*env, "vllm", "serve", shlex.quote(model_ref)],
                           [*vllm_args(one, util, sp, draft_ref),
                            ("--kv-transfer-config", _kv(role))])
            elif engine == "dynamo":
                cmd = _cmd([*env, "python", "-m", "dynamo.vllm"],
                           [("--model", model_ref), *vllm_args(one, util, sp, draft_ref),
                            (f"--is-{side}-worker", None), ("--kv-transfer-config",
                                                           _kv("kv_both"))])
            elif engine == "trtllm":
                args = [a for a in trtllm_args(one, kv_fraction(dep, one))
                        if a[0] != "--extra_llm_api_options"]
                cmd = _cmd([*env, "trtllm-serve", shlex.quote(model_ref)],
                           [*args, ("--host", "localhost"), ("--port", port),
                            ("--extra_llm_api_options",
                             f"{TRT_NAME[side]}-extra-llm-api-config.yml")])
                urls[side].append(f"localhost:{port}")
                port += 1
            else:
                cmd = _cmd([*env, "python", "-m", "sglang.launch_server"],
                           [("--model-path", model_ref), *sglang_args(one, util, sp, draft_ref),
                            ("--disaggregation-mode", side),
                            ("--disaggregation-transfer-backend", "nixl"), ("--port", port)])
                urls[side].append(f"http://127.0.0.1:{port}")
                port += 1
            lines.append(cmd + " &")
    if engine == "vllm":
        lines.append("# a proxy sends each request to a prefill instance (kv_producer), then to "
                     "a decode instance (kv_consumer): vLLM routes none itself")
    elif engine == "trtllm":
        lines += _trt_config(urls)
    elif engine == "sglang":
        lines.append(_cmd(["python", "-m", "sglang_router.launch_router"],
                          [("--pd-disaggregation", None),
                           *(("--prefill", u) for u in urls["prefill"]),
                           *(("--decode", u) for u in urls["decode"]),
                           ("--host", "0.0.0.0"), ("--port", 8000)]))
    return "\n".join(lines)


def emit_text(engine: str, doc: dict[str, Any], dep: Any, sp: Any, model_src: Any,
              draft_src: Any) -> str:
    """--emit's output for any serve document: a disaggregated deployment here, the rest as
    emit.launch_text writes it; speculation at the k the plan has (--find-gpus searches it)."""
    from pathlib import Path

    from .emit import _check, launch_text
    from .search_dims import spec_at

    d = doc["deployment"]
    if sp is not None and d.get("speculative"):
        sp = spec_at(sp, d["speculative"]["k"])
    if not d.get("pd"):
        return launch_text(engine, doc, dep, sp, model_src, draft_src)
    for side in ("prefill", "decode"):
        _check(engine, _pool_doc(doc, side)["deployment"])
    model_ref = str(model_src) if model_src is not None else doc["model"]
    draft_ref = None
    if sp is not None and sp.spec.kind != "mtp":
        draft_ref = str(Path(draft_src).parent) if sp.spec.kind == "eagle3" else str(draft_src)
    return launch_pd(engine, doc, model_ref, dep.opts.utilization, sp, draft_ref,
                     dep.gpu.gpus_per_node, dep)
