#!/usr/bin/env python3
"""Measure the stateful-mixer families with PyTorch and write ``tests/data/mixers_reference.json``.

Self-contained (the shared harness of shapecalc/reference/ had not landed on main when this was
written). Run by hand; the tests only read the JSON (tests/test_mixers_reference.py re-measures
one case live when torch is installed):

    pip install torch==2.13.0+cpu transformers==5.24.0
    python tests/torch_reference/measure_mixers.py [--out PATH]
    python tests/torch_reference/measure_mixers.py --cases tests/torch_reference/mixer_cases_X.py \
        --out tests/data/mixers_reference_X.json

(``--cases``: a module whose CASES list replaces this file's; the tests read
tests/data/mixers_reference.json and every tests/data/mixers_reference_*.json beside it, so a
group of families is measured into a file of its own.)

Per case (each a config.json that shapecalc's reader takes):

  * ``params_meta``: the model built from ``full_config`` at full size on the meta device,
    ``sum(p.numel())``.
  * FLOPs: ``torch.utils.flop_counter.FlopCounterMode`` on real tensors at the reduced width of
    ``hf_config`` (float32, eager attention, CPU, random weights, the mixers' torch path: no
    mamba_ssm / causal_conv1d / fla kernels installed), B=1, T=16 and T=300 (past one chunk):
    ``prefill`` (logits on every position, ``logits_to_keep=0``) and ``decode`` (one token on
    the prefill's cache), with per-op breakdowns.
  * Caches after the prefill, the reduced model in bfloat16: ``kv_cache_bytes`` (keys and values
    of the attention layers) and ``state_cache_bytes`` (each Mamba-2 layer's conv state and
    recurrent state), with their shapes and dtypes.
"""

from __future__ import annotations

import argparse
import json
import os

import torch
from torch.utils.flop_counter import FlopCounterMode
from transformers import AutoConfig, AutoModelForCausalLM

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(REPO, "tests", "data", "mixers_reference.json")
NANO_PATTERN = "M-M-M-MM-M-M-M*-M-M-M*-M-M-M-M*-M-M-M-M*-M-MM-M-M-M-M-M-"
NANO = dict(model_type="nemotron_h", num_hidden_layers=56, hidden_size=4480,
            intermediate_size=15680, num_attention_heads=40, num_key_value_heads=8, head_dim=128,
            vocab_size=131072, hybrid_override_pattern=NANO_PATTERN, ssm_state_size=128,
            conv_kernel=4, n_groups=8, mamba_num_heads=128, mamba_head_dim=80)
# the same layout at reduced width: every symbol a different number
SMALL = dict(hidden_size=48, intermediate_size=80, num_attention_heads=4, num_key_value_heads=2,
             head_dim=12, vocab_size=320, mamba_num_heads=8, mamba_head_dim=6, n_groups=2,
             ssm_state_size=10)
CASES = [
    ("nemotron-nano-9b-v2", "the preset's config.json (sizes as quoted from the Hub's)",
     NANO, {**NANO, **SMALL}),
    ("nemotron_h-class-defaults", "NemotronHConfig's defaults, with layers_block_type "
     "[linear_attention, full_attention, mlp] (the default's moe layer is refused)",
     dict(model_type="nemotron_h", layers_block_type=["linear_attention", "full_attention",
                                                      "mlp"]),
     dict(model_type="nemotron_h", layers_block_type=["linear_attention", "full_attention",
                                                      "mlp"], **SMALL)),
]
# Qwen3NextConfig's defaults are the Qwen3-Next-80B-A3B checkpoint's (the preset's); the widths
# the reader must be given are spelled out
QNEXT = dict(model_type="qwen3_next", vocab_size=151936, hidden_size=2048, num_hidden_layers=48,
             num_attention_heads=16, intermediate_size=5632)
QSMALL = dict(model_type="qwen3_next", vocab_size=320, hidden_size=48, num_hidden_layers=8,
              num_attention_heads=4, num_key_value_heads=2, head_dim=16, intermediate_size=80,
              linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8,
              linear_value_head_dim=6, num_experts=6, num_experts_per_tok=2,
              moe_intermediate_size=20, shared_expert_intermediate_size=24)
CASES += [
    ("qwen3-next-80b-a3b", "the preset: Qwen3NextConfig's defaults (the class's reference "
     "checkpoint), at reduced width every layer MoE with a gated shared expert", QNEXT, QSMALL),
    ("qwen3_next-mlp-only", "Qwen3NextConfig at reduced width, mlp_only_layers [0, 1, 2] and "
     "decoder_sparse_step 2 (dense and MoE layers mix), full_attention_interval 3",
     {**QNEXT, "mlp_only_layers": [0, 1, 2], "decoder_sparse_step": 2,
      "full_attention_interval": 3},
     {**QSMALL, "mlp_only_layers": [0, 1, 2], "decoder_sparse_step": 2,
      "full_attention_interval": 3}),
]
# Qwen3.5's text models (the text_config of the multimodal qwen3_5 / qwen3_5_moe configs in
# tests/data/hf), and at reduced width without layer_types (full_attention_interval 4)
HF_DIR = os.path.join(REPO, "tests", "data", "hf")


def text_config(stem: str) -> dict:
    with open(os.path.join(HF_DIR, f"{stem}.json")) as f:
        return json.load(f)["text_config"]


Q35SMALL = dict(vocab_size=320, hidden_size=48, num_hidden_layers=8, num_attention_heads=4,
                num_key_value_heads=2, head_dim=16, linear_num_key_heads=2,
                linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=6)
CASES += [
    ("qwen3.5-9b", "the preset's text_config; reduced width", text_config("qwen3.5-9b"),
     dict(model_type="qwen3_5_text", intermediate_size=80, **Q35SMALL)),
    ("qwen3.5-35b-a3b", "the preset's text_config; reduced width, every layer MoE with a gated "
     "shared expert", text_config("qwen3.5-35b-a3b"),
     dict(model_type="qwen3_5_moe_text", num_experts=6, num_experts_per_tok=2,
          moe_intermediate_size=20, shared_expert_intermediate_size=24, **Q35SMALL)),
]
TS = (16, 300)


def build(cfg: dict, **kw):
    c = dict(cfg)
    mt = c.pop("model_type")
    conf = AutoConfig.for_model(mt, **c)
    # eager experts: each expert on its own tokens (grouped_mm has no FlopCounterMode formula)
    return AutoModelForCausalLM.from_config(conf, attn_implementation="eager",
                                            experts_implementation="eager", **kw)


def counted(model, ids, **kw):
    fc = FlopCounterMode(display=False)
    with fc:
        out = model(ids, **kw)
    ops = {str(k): int(v) for k, v in fc.get_flop_counts()["Global"].items()}
    return out, int(fc.get_total_flops()), ops


def caches(cache) -> dict:
    kv = state = 0
    shapes = []
    for i, layer in enumerate(cache.layers):
        for part in ("conv_states", "recurrent_states"):  # Mamba-2 and gated DeltaNet layers
            for t in (getattr(layer, part, None) or {}).values():
                if t is not None:
                    state += t.numel() * t.element_size()
                    shapes.append([i, part, list(t.shape), str(t.dtype)])
        for part in ("keys", "values"):
            t = getattr(layer, part, None)
            if isinstance(t, torch.Tensor) and t.numel():
                kv += t.numel() * t.element_size()
                shapes.append([i, part, list(t.shape), str(t.dtype)])
    return {"kv_cache_bytes": kv, "state_cache_bytes": state, "shapes": shapes}


def measure(full: dict, small: dict) -> dict:
    with torch.device("meta"):
        params = sum(p.numel() for p in build(full).parameters())
    torch.manual_seed(0)
    model = build(small).eval()
    out: dict = {"params_meta": params, "steps": {}}
    for T in TS:
        ids = torch.randint(0, small["vocab_size"], (1, T + 1), generator=torch.Generator()
                            .manual_seed(T))
        with torch.no_grad():
            o, pre, pre_ops = counted(model, ids[:, :T], use_cache=True, logits_to_keep=0)
            _, dec, dec_ops = counted(model, ids[:, T:], cache=o.past_key_values,
                                      use_cache=True, logits_to_keep=0)
        with torch.no_grad():
            half = model.to(torch.bfloat16)
            o16 = half(ids[:, :T], use_cache=True, logits_to_keep=1)
            model = half.to(torch.float32)
        out["steps"][str(T)] = {"prefill_flops": pre, "prefill_ops": pre_ops,
                                "decode_flops": dec, "decode_ops": dec_ops,
                                "cache_bf16": caches(o16.past_key_values)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=OUT)
    ap.add_argument("--cases", help="a .py file whose CASES list is measured instead")
    ap.add_argument("--only", help="comma-separated case names to measure again; the others are "
                    "kept from --out as they are (and cases no longer listed are dropped)")
    a = ap.parse_args()
    cases = CASES
    if a.cases:
        import importlib.util
        spec = importlib.util.spec_from_file_location("mixer_cases", a.cases)
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        cases = mod.CASES
    import transformers
    doc = {"how": __doc__.split("Per case")[1].strip(), "torch": torch.__version__,
           "transformers": transformers.__version__, "B": 1, "T": list(TS), "cases": []}
    only = set(a.only.split(",")) if a.only else None
    kept = {}
    if only is not None:
        with open(a.out) as f:
            kept = {c["name"]: c for c in json.load(f)["cases"]}
        unknown = only - {c[0] for c in cases}
        assert not unknown, f"--only names no case: {sorted(unknown)}"
    for name, what, full, small in cases:
        if only is not None and name not in only:
            doc["cases"].append(kept[name])
            continue
        doc["cases"].append({"name": name, "what": what, "full_config": full,
                             "hf_config": small, **measure(full, small)})
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
