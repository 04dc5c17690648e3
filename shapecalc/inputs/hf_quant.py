"""A config.json's `quantization_config` → the Quantization record (model/quantization.py).

Read, never ignored: every key of each method is read or named here as one that changes no stored
tensor; anything else, and any value that cannot be a checkpoint, is refused in one line naming
the key. The methods and keys are those of transformers 5.24's quantization configs
(utils/quantization_config.py) and of the checkpoints that ship them (modelopt writes its own).
Imports nothing from the other hf_*.py readers.
"""

from __future__ import annotations

from typing import Any

from ..model.errors import ShapecalcError

KEY = "quantization_config"
METHODS = ("fp8", "mxfp4", "modelopt", "gptq", "awq", "bitsandbytes")
# keys that say how a model is loaded, calibrated or run, not how its tensors are stored
RUNTIME = {
    "fp8": {"quant_method", "dequantize", "fmt", "scale_fmt", "activation_scheme",
            "weight_block_size", "modules_to_not_convert", "modules_to_convert", "expert_dtype"},
    "mxfp4": {"quant_method", "dequantize", "modules_to_not_convert"},
    "modelopt": {"quant_method", "quant_algo", "group_size", "exclude_modules", "ignore",
                 "kv_cache_quant_algo", "producer"},
    "gptq": {"quant_method", "bits", "group_size", "desc_act", "sym", "lm_head",
             "checkpoint_format", "pack_dtype", "modules_in_block_to_quantize",
             "damp_percent", "damp_auto_increment", "true_sequential", "static_groups",
             "dataset", "tokenizer", "model_name_or_path", "model_file_base_name", "use_exllama",
             "exllama_config", "use_cuda_fp16", "max_input_length", "cache_block_outputs",
             "batch_size", "pad_token_id", "module_name_preceding_first_block",
             "block_name_to_quantize", "backend", "meta", "format", "quantizer", "v2",
             "mse", "act_group_aware"},
    "awq": {"quant_method", "bits", "group_size", "zero_point", "version", "backend",
            "modules_to_not_convert", "do_fuse", "fuse_max_seq_len", "modules_to_fuse",
            "exllama_config"},
    "bitsandbytes": {"quant_method", "load_in_4bit", "load_in_8bit", "_load_in_4bit",
                     "_load_in_8bit", "bnb_4bit_quant_type", "bnb_4bit_use_double_quant",
                     "bnb_4bit_compute_dtype", "bnb_4bit_quant_storage", "llm_int8_skip_modules",
                     "llm_int8_threshold", "llm_int8_has_fp16_weight",
                     "llm_int8_enable_fp32_cpu_offload"},
}
WIDE = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "bf16": "bf16", "fp16": "fp16",
        "fp32": "fp32"}


def _key(name: str) -> str:
    return f"{KEY}.{name}"


def _list(q: dict[str, Any], name: str) -> tuple[str, ...]:
    v = q.get(name)
    if v is None:
        return ()
    if not isinstance(v, list) or not all(isinstance(x, str) and x for x in v):
        raise ShapecalcError(_key(name), f"must be a list of module names, not {v!r}")
    return tuple(v)


def _bool(q: dict[str, Any], name: str, default: bool) -> bool:
    v = q.get(name, default)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise ShapecalcError(_key(name), f"must be true or false, not {v!r}")
    return v


def _int(q: dict[str, Any], name: str, default: int | None = None) -> int | None:
    v = q.get(name, default)
    if v is not None and (type(v) is not int or v == 0 or v < -1):
        raise ShapecalcError(_key(name), f"must be a positive integer (or -1), not {v!r}")
    return v


def _one_of(q: dict[str, Any], name: str, ok: tuple[Any, ...], default: Any) -> Any:
    v = q.get(name, default)
    if v not in ok:
        raise ShapecalcError(_key(name), f"{v!r} is not read; shapecalc reads "
                             + ", ".join(repr(x) for x in ok))
    return v


def read(cfg: dict[str, Any]) -> dict[str, Any] | None:
    """The `quantization` fields of a config.json (its text_config's when the top has none), or
    None for a checkpoint stored at its width."""
    q = cfg.get(KEY)
    text = cfg.get("text_config")
    if q is None and isinstance(text, dict):
        q = text.get(KEY)
    if q is None:
        return None
    if not isinstance(q, dict):
        raise ShapecalcError(KEY, f"must be a table of the quantizer's fields, not {q!r}")
    method = q.get("quant_method")
    if method not in METHODS:
        raise ShapecalcError(_key("quant_method"), f"{method!r} is not read; shapecalc reads "
                             + ", ".join(METHODS))
    unknown = sorted(set(q) - RUNTIME[method])
    if unknown:
        raise ShapecalcError(_key(unknown[0]), f"is not a {method} key shapecalc knows; it may "
                             "change the stored tensors, so it is not ignored")
    wide = WIDE.get(str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16"))
    if wide is None:
        raise ShapecalcError("torch_dtype", f"{cfg.get('torch_dtype') or cfg.get('dtype')!r} is "
                             "not a width the unquantized tensors can have (bfloat16, float16, "
                             "float32)")
    return {"wide": wide, **{"fp8": _fp8, "mxfp4": _mxfp4, "modelopt": _modelopt, "gptq": _gptq,
                             "awq": _awq, "bitsandbytes": _bnb}[method](q)}


def _fp8(q: dict[str, Any]) -> dict[str, Any]:
    """transformers' FineGrainedFP8Config: e4m3 weights, a scale_inv per weight_block_size block
    (null: per tensor). scale_fmt ue8m0 says how kernels round the scales; DeepSeek-V3.1 stores
    them fp32 all the same, so it changes no stored byte."""
    _one_of(q, "fmt", ("e4m3",), "e4m3")
    _one_of(q, "scale_fmt", ("float", "ue8m0", None), None)
    _one_of(q, "expert_dtype", ("fp8", None), None)
    _one_of(q, "dequantize", (True, False), False)  # a loading option: the checkpoint is fp8
    if q.get("modules_to_convert"):
        raise ShapecalcError(_key("modules_to_convert"), "fp8 embeddings are not modelled")
    block = q.get("weight_block_size")
    if block is not None and (not isinstance(block, list) or len(block) != 2
                              or not all(type(b) is int and b > 0 for b in block)):
        raise ShapecalcError(_key("weight_block_size"), f"must be [out, in], not {block!r}")
    scheme = _one_of(q, "activation_scheme", ("dynamic", "static"), "dynamic")
    return {"format": "fp8-block", "block": block, "static_activations": scheme == "static",
            "keep": _list(q, "modules_to_not_convert")}


def _mxfp4(q: dict[str, Any]) -> dict[str, Any]:
    """gpt-oss: the experts' *_blocks and *_scales (32-blocks, e8m0)."""
    _one_of(q, "dequantize", (True, False), False)
    return {"format": "mxfp4", "keep": _list(q, "modules_to_not_convert")}


def _modelopt(q: dict[str, Any]) -> dict[str, Any]:
    """NVIDIA ModelOpt's NVFP4 export: 16-blocks with e4m3 scales, fp32 weight_scale_2 and
    input_scale per matrix; an fp8 KV cache adds k_scale and v_scale."""
    _one_of(q, "quant_algo", ("NVFP4",), None)
    _one_of(q, "group_size", (16,), 16)
    kv = _one_of(q, "kv_cache_quant_algo", ("FP8", None), None)
    keep = _list(q, "exclude_modules") + _list(q, "ignore")
    return {"format": "nvfp4", "kv_scales": kv == "FP8", "keep": keep}


def _gptq(q: dict[str, Any]) -> dict[str, Any]:
    """GPTQ (AutoGPTQ / GPTQModel, format gptq): qweight, qzeros, scales, g_idx per matrix."""
    if q.get("modules_in_block_to_quantize") is not None:
        raise ShapecalcError(_key("modules_in_block_to_quantize"), "a partial quantization of "
                             "the blocks is not modelled; null quantizes every matrix")
    _one_of(q, "checkpoint_format", ("gptq", "gptq_v2", None), None)
    _one_of(q, "format", ("gptq", "gptq_v2", None), None)
    _one_of(q, "pack_dtype", ("int32", None), None)
    group = _int(q, "group_size", 128)
    return {"format": "gptq", "bits": _int(q, "bits"), "group_size": None if group == -1 else
            group, "desc_act": _bool(q, "desc_act", False), "sym": _bool(q, "sym", True),
            "lm_head": _bool(q, "lm_head", False)}


def _awq(q: dict[str, Any]) -> dict[str, Any]:
    """AutoAWQ's gemm layout: qweight [in, out/8], qzeros and scales per group."""
    _one_of(q, "version", ("gemm", "GEMM", "exllama"), "gemm")
    if not _bool(q, "zero_point", True):
        raise ShapecalcError(_key("zero_point"), "false (no qzeros) is not modelled")
    group = _int(q, "group_size", 128)
    return {"format": "awq", "bits": _int(q, "bits"), "group_size": None if group == -1 else
            group, "keep": _list(q, "modules_to_not_convert")}


def _bnb(q: dict[str, Any]) -> dict[str, Any]:
    """bitsandbytes, as transformers saves it: NF4 Params4bit (4-bit) or LLM.int8 (8-bit)."""
    four = _bool(q, "load_in_4bit", False) or _bool(q, "_load_in_4bit", False)
    eight = _bool(q, "load_in_8bit", False) or _bool(q, "_load_in_8bit", False)
    if four == eight:
        raise ShapecalcError(_key("load_in_4bit"), "give load_in_4bit or load_in_8bit (one)")
    keep = _list(q, "llm_int8_skip_modules")
    if eight:
        if _bool(q, "llm_int8_has_fp16_weight", False):
            raise ShapecalcError(_key("llm_int8_has_fp16_weight"), "true keeps 16-bit weights: "
                                 "the checkpoint is not int8")
        return {"format": "bnb-int8", "keep": keep}
    _one_of(q, "bnb_4bit_quant_type", ("nf4",), "fp4")
    _one_of(q, "bnb_4bit_quant_storage", ("uint8", None), None)
    return {"format": "bnb-nf4", "double_quant": _bool(q, "bnb_4bit_use_double_quant", False),
            "keep": keep}
