"""What transformers' quantizers build on CPU, measured: `python3 -m tests.quant_reference --write`
records tests/data/quant_reference.json; tests/test_quant_reference.py compares shapecalc with it
(and re-measures when torch and transformers are installed).

Which quantizers build on CPU, in transformers 5.24 (found by running each):
- fp8 (FineGrainedFP8HfQuantizer): yes. Its validate_environment, without a GPU, switches a
  pre-quantized checkpoint to `dequantize` (bf16), so it is not called: the quantizer's
  _process_model_before_weight_loading builds the FP8Linear / FP8Experts layout on the meta device.
- mxfp4 (Mxfp4HfQuantizer): replace_with_mxfp4_linear needs the `kernels` package and the Hub's
  gpt-oss triton kernels; the module it puts in, Mxfp4GptOssExperts, is built here on its own.
  Its parameters are the packed *_blocks (as [E, out, in/2] uint8) and fp32 biases; the e8m0
  scales are attached at load (precision configs), not parameters.
- nvfp4 (NVFP4HfQuantizer): refuses pre-quantized checkpoints ("not supported yet") and needs
  `kernels` and CUDA: not built. ModelOpt's exported layout is checked by hand (test_quant.py).
- gptq, awq: need gptqmodel (and optimum) / autoawq: not installed, not built.
- bitsandbytes 4-bit and 8-bit: need bitsandbytes: not installed, not built.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

PATH = Path(__file__).parent / "data" / "quant_reference.json"
FP8 = {"quant_method": "fp8", "weight_block_size": [128, 128], "activation_scheme": "dynamic",
       "fmt": "e4m3"}
# tiny configs: widths that are multiples of 128, and one (llama-edges) whose blocks are cut at
# the edges; the fused experts of transformers 5 then store what the per-expert checkpoints do
FP8_CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "llama-fp8": ("llama", dict(vocab_size=1000, hidden_size=256, intermediate_size=512,
                                num_hidden_layers=2, num_attention_heads=4,
                                num_key_value_heads=2)),
    "llama-fp8-edges": ("llama", dict(vocab_size=1000, hidden_size=320, intermediate_size=200,
                                      num_hidden_layers=2, num_attention_heads=5,
                                      num_key_value_heads=5)),
    "llama-fp8-keep-layer0-mlp": ("llama", dict(
        vocab_size=1000, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2,
        modules_to_not_convert=["model.layers.0.mlp", "lm_head"])),
    "qwen3_moe-fp8": ("qwen3_moe", dict(
        vocab_size=1000, hidden_size=256, intermediate_size=512, moe_intermediate_size=128,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=64,
        num_experts=4, num_experts_per_tok=2)),
    "deepseek_v3-fp8": ("deepseek_v3", dict(
        vocab_size=1000, hidden_size=256, intermediate_size=384, moe_intermediate_size=128,
        num_hidden_layers=2, first_k_dense_replace=1, num_attention_heads=2,
        num_key_value_heads=2, q_lora_rank=128, kv_lora_rank=128, qk_nope_head_dim=128,
        qk_rope_head_dim=64, v_head_dim=128, n_routed_experts=4, num_experts_per_tok=2,
        n_shared_experts=1, n_group=1, topk_group=1)),
}
GPT_OSS = dict(vocab_size=1000, hidden_size=128, intermediate_size=128, num_hidden_layers=2,
               num_attention_heads=4, num_key_value_heads=2, head_dim=32, num_local_experts=4,
               num_experts_per_tok=2, layer_types=["sliding_attention", "full_attention"])
GPT_OSS_KEEP = ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens",
                "lm_head"]


def _parts(params: list[tuple[str, list[int], str]]) -> dict[str, int]:
    """Bytes of the quantized data and scales, and the elements of the rest (whose width
    transformers may widen: DeepSeek's router is kept fp32)."""
    size = {"torch.float8_e4m3fn": 1, "torch.uint8": 1, "torch.float32": 4,
            "torch.bfloat16": 2}
    out = {"data_bytes": 0, "scale_bytes": 0, "unquantized_elements": 0}
    for name, shape, dt in params:
        n = 1
        for d in shape:
            n *= d
        if name.endswith("scale_inv"):
            out["scale_bytes"] += n * size[dt]
        elif dt in ("torch.float8_e4m3fn", "torch.uint8"):
            out["data_bytes"] += n * size[dt]
        else:
            out["unquantized_elements"] += n
    return out


def _config(model_type: str, kw: dict[str, Any], quant: dict[str, Any] | None) -> Any:
    from transformers import AutoConfig

    kw = dict(kw)
    keep = kw.pop("modules_to_not_convert", None)
    cfg = AutoConfig.for_model(model_type, tie_word_embeddings=False, **kw)
    if quant is not None:
        cfg.quantization_config = {**quant, **({"modules_to_not_convert": keep} if keep else {})}
    return cfg


def _json(cfg: Any) -> dict[str, Any]:
    d = cfg.to_dict()
    return {k: v for k, v in d.items() if _serialisable(v)}


def _serialisable(v: Any) -> bool:
    try:
        json.dumps(v)
    except TypeError:
        return False
    return True


def measure_fp8(model_type: str, kw: dict[str, Any]) -> dict[str, Any]:
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.quantizers.quantizer_finegrained_fp8 import FineGrainedFP8HfQuantizer
    from transformers.utils.quantization_config import FineGrainedFP8Config

    cfg = _config(model_type, kw, FP8)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    q = cfg.quantization_config
    qc = FineGrainedFP8Config(weight_block_size=q["weight_block_size"],
                              modules_to_not_convert=q.get("modules_to_not_convert"))
    FineGrainedFP8HfQuantizer(qc, pre_quantized=True)._process_model_before_weight_loading(model)
    params = [(n, list(p.shape), str(p.dtype)) for n, p in model.named_parameters()]
    return {"config": _json(cfg), "params": params, **_parts(params)}


def measure_mxfp4() -> dict[str, Any]:
    import torch
    from transformers.integrations.mxfp4 import Mxfp4GptOssExperts

    cfg = _config("gpt_oss", GPT_OSS, None)
    with torch.device("meta"):
        experts = Mxfp4GptOssExperts(cfg)
    params = [(n, list(p.shape), str(p.dtype)) for n, p in experts.named_parameters()]
    cfg.quantization_config = {"quant_method": "mxfp4", "modules_to_not_convert": GPT_OSS_KEEP}
    return {"config": _json(cfg), "params": params, "layers": cfg.num_hidden_layers,
            **_parts(params)}


def measure() -> dict[str, Any]:
    import transformers

    return {
        "transformers": transformers.__version__,
        "how": __doc__,
        "fp8": {name: measure_fp8(mt, kw) for name, (mt, kw) in FP8_CASES.items()},
        "mxfp4_experts": measure_mxfp4(),
    }


if __name__ == "__main__" and "--write" in sys.argv:
    PATH.write_text(json.dumps(measure(), indent=1) + "\n")
    print(f"→ {PATH}")
