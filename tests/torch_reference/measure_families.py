"""Measure the families of 2025–2026 that are entries of shapecalc's table over existing
mechanisms, and write ``tests/data/families_reference.json``.

Run manually (the test suite only reads the JSON, except its live re-measure):

    pip install torch==2.13.0 transformers==5.24.0
    python tests/torch_reference/measure_families.py [--out PATH]

For each family, two configs: its preset's config.json (tests/data/hf) and its config class's
defaults (``AutoConfig.for_model(model_type)``, as transformers writes them for a reference
checkpoint). Each is measured two ways:

  * ``params``: ``sum(p.numel())`` of the model built on the meta device at full size;
  * ``cases``: the same config at reduced width (the layer pattern kept), random weights,
    float32, eager attention, eager experts, CPU, B=1 at T=16 and T=300, counted with
    ``torch.utils.flop_counter.FlopCounterMode`` (prefill with the logits of every position, and
    one decode step on the prefill's cache), with the bytes the cache holds after the prefill
    (a sliding layer counted at min(T, W) tokens: vLLM's and shapecalc's convention; transformers'
    DynamicSlidingWindowLayer keeps W−1). The formulas checked there are the ones the full size
    uses (the same code with other widths).
"""

from __future__ import annotations

import json
import os
import sys

import torch
from transformers import AutoConfig, AutoModelForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import measure_flops
from measure_flops import config_to_json_dict, count, forward_steps

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_OUT = os.path.join(REPO_ROOT, "tests", "data", "families_reference.json")
HF_DIR = os.path.join(REPO_ROOT, "tests", "data", "hf")
SEQS = (16, 300)
# each family's preset (its config.json in tests/data/hf)
PRESETS = {
    "smollm3": "smollm3-3b",
    "seed_oss": "seed-oss-36b",
    "glm4_moe": "glm-4.5-air",
    "cohere2": "command-r7b",
    "exaone4": "exaone-4.0-32b",
    "minimax_m2": "minimax-m2",
    "hy_v3": "hy3",
    "exaone_moe": "k-exaone",
    "granite_swa": "granite-swa",
    "granitemoe_swa": "granitemoe-swa",
    "afmoe": "afmoe",
}
# reduced width: the keys set on top of a config to make it small (experts and windows kept in
# kind, fewer and narrower)
SMALL = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
             intermediate_size=176, vocab_size=1000, max_position_embeddings=1024,
             pad_token_id=0, bos_token_id=1, eos_token_id=2)
SMALL_MOE = dict(moe_intermediate_size=32, n_routed_experts=8, num_experts_per_tok=2)
EXPERT_KEYS = ("n_routed_experts", "num_experts", "num_local_experts")
LAYERS = 8  # two periods of the 4-layer patterns
WINDOW = 100  # below T=300: the sliding layers hold W tokens


def _small(model_type: str, cfg: dict) -> dict:
    out = {**cfg, **SMALL, "num_hidden_layers": LAYERS}
    if any(k in cfg for k in EXPERT_KEYS):
        # the family's own keys only (another family's would be an unread key)
        out.update({k: v for k, v in SMALL_MOE.items() if k in cfg})
        out.update({k: SMALL_MOE["n_routed_experts"] for k in EXPERT_KEYS if k in cfg})
        if cfg.get("n_shared_experts"):
            out["n_shared_experts"] = 1
        if "first_k_dense_replace" in cfg:
            out["first_k_dense_replace"] = min(cfg["first_k_dense_replace"] or 0, 1)
    if cfg.get("rotary_dim") and cfg.get("head_dim"):  # MiniMax-M2's partial RoPE, kept in kind
        out["rotary_dim"] = cfg["rotary_dim"] * SMALL["head_dim"] // cfg["head_dim"]
    if out.get("sliding_window"):
        out["sliding_window"] = WINDOW
    if isinstance(out.get("no_rope_layers"), list):
        out["no_rope_layers"] = out["no_rope_layers"][:LAYERS]
    for k in ("layer_types", "mlp_layer_types"):
        if isinstance(out.get(k), list):
            out[k] = out[k][:LAYERS]
    for k in ("architectures", "torch_dtype", "dtype", "transformers_version", "model_type",
              "auto_map", "quantization_config"):
        out.pop(k, None)
    return out


def _meta_params(cfg) -> int:
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg)
    return int(sum(p.numel() for p in model.parameters()))


def measure_case(name: str, model_type: str, kwargs: dict, seq: int) -> dict:
    cfg = AutoConfig.for_model(model_type, **kwargs)
    torch.manual_seed(0)
    moe = any(k in kwargs for k in EXPERT_KEYS)
    extra = dict(experts_implementation="eager") if moe else {}
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager",
                                             dtype=torch.float32, **extra).eval()
    measure_flops.B, measure_flops.T = 1, seq
    steps = forward_steps(model, count, model.config.vocab_size)
    hf_config = config_to_json_dict(model.config)
    hf_config.pop("experts_implementation", None)
    return {
        "name": name, "model_type": model_type, "hf_config": hf_config, "batch": 1, "seq": seq,
        "prefill_flops": steps["prefill"][0], "decode_flops": steps["decode"][0],
        "prefill_ops": steps["prefill"][1], "decode_ops": steps["decode"][1],
        "params": int(sum(p.numel() for p in model.parameters())),
        "kv_cache_bytes_window_W": int(steps["kv_window"]),
        "kv_cache_bytes_hf": int(steps["kv"][0]),
    }


def measure() -> dict:
    params, cases = {}, []
    for mt, preset in PRESETS.items():
        with open(os.path.join(HF_DIR, f"{preset}.json")) as f:
            real = json.load(f)
        configs = {preset: real, f"{mt}-class-defaults": config_to_json_dict(
            AutoConfig.for_model(mt))}
        for name, cfg in configs.items():
            params[name] = {"model_type": mt, "hf_config": cfg, "params_meta": _meta_params(
                AutoConfig.for_model(mt, **{k: v for k, v in cfg.items()
                                            if k != "model_type"}))}
            for seq in SEQS:
                cases.append(measure_case(f"{name}-small-T{seq}", mt, _small(mt, cfg), seq))
                print(f"{cases[-1]['name']}: prefill {cases[-1]['prefill_flops']:,} "
                      f"decode {cases[-1]['decode_flops']:,}", file=sys.stderr)
    import transformers
    return {
        "torch": torch.__version__, "transformers": transformers.__version__,
        "how": __doc__, "params": params, "cases": cases,
    }


def main(argv: list[str]) -> int:
    out = argv[argv.index("--out") + 1] if "--out" in argv else DEFAULT_OUT
    data = measure()
    with open(out, "w") as f:
        json.dump(data, f, indent=1, sort_keys=False)
        f.write("\n")
    print(f"{len(data['cases'])} cases, {len(data['params'])} configs → {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
