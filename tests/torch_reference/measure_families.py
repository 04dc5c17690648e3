"""Measure the families of 2025–2026 that are entries of shapecalc's table over existing
mechanisms, and write ``tests/data/families_reference.json``.

Run manually (the test suite only reads the JSON, except its live re-measure):

    pip install torch==2.13.0 transformers==5.24.0
    python tests/torch_reference/measure_families.py [--out PATH] [--only MT,MT]

(``--only``: measure those model_types again and keep the file's other entries as they are.)

For each family, its presets' config.json (tests/data/hf) and its config class's defaults
(``AutoConfig.for_model(model_type)``, as transformers writes them for a reference checkpoint);
where transformers cannot build a model from its own defaults (Dots1Config leaves
n_routed_experts null, HunYuanMoEV1Config head_dim), ``unbuildable`` records them and the error
instead. Each config is
measured two ways:

  * ``params``: ``sum(p.numel())`` of the model built on the meta device at full size;
  * ``cases``: the same config at reduced width (the layer pattern kept), random weights,
    float32, eager attention, eager experts, CPU, B=1 at T=16 and T=300, counted with
    ``torch.utils.flop_counter.FlopCounterMode`` (prefill with the logits of every position, and
    one decode step on the prefill's cache), with the bytes the cache holds after the prefill
    (a sliding layer counted at min(T, W) tokens: vLLM's and shapecalc's convention; transformers'
    DynamicSlidingWindowLayer keeps W−1). The formulas checked there are the ones the full size
    uses (the same code with other widths). MLA families (glm4_moe_lite) cache the latent c_KV and
    the rope key, and expand them with kv_b_proj at every step: shapecalc's ``--mla-form latent``.
"""

from __future__ import annotations

import json
import os
import sys

import torch
import transformers
from transformers import AutoConfig

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import config_to_json_dict

from shapecalc.reference.measure import build as _build  # Mistral 4 by its own class
from shapecalc.reference.measure import forward_steps

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_OUT = os.path.join(REPO_ROOT, "tests", "data", "families_reference.json")
HF_DIR = os.path.join(REPO_ROOT, "tests", "data", "hf")
SEQS = (16, 300)
# each family's presets (their config.json in tests/data/hf)
PRESETS: dict[str, tuple[str, ...]] = {
    "smollm3": ("smollm3-3b",),
    "seed_oss": ("seed-oss-36b",),
    "glm4_moe": ("glm-4.5-air",),
    "cwm": ("cwm-32b",),
    "olmo3": ("olmo3-7b", "olmo3-32b"),
    "dots1": ("dots-llm1",),
    "glm4_moe_lite": ("glm-4.7-flash",),
    "mistral4": ("mistral-small-4",),
    "cohere2": ("command-r7b",),
    "exaone4": ("exaone-4.0-32b",),
    "minimax_m2": ("minimax-m2",),
    "hy_v3": ("hy3",),
    "solar_open": ("solar-open-100b",),
    "hunyuan_v1_moe": ("hunyuan-a13b",),
    "ernie4_5_moe": ("ernie-4.5-21b-a3b", "ernie-4.5-300b-a47b"),
    "exaone_moe": ("k-exaone",),
    "granite_swa": ("granite-swa",),
    "granitemoe_swa": ("granitemoe-swa",),
    "afmoe": ("afmoe",),
    "apertus": ("apertus-8b", "apertus-70b"),
    "ministral3": ("ministral-3-8b",),
    "nanochat": ("nanochat-d32",),
    "cohere2_moe": ("command-a-plus",),
    "mimo_v2_flash": ("mimo-v2-flash",),
    "laguna": ("laguna",),
    # its class defaults only: the released checkpoints prune the LM head (refused)
    "apertus1p5_text": (),
    # Gemma 4: its preset from Gemma4TextConfig's defaults (no Hub config.json found); the
    # unified decoder at its class defaults only
    "gemma4_text": ("gemma-4",),
    "gemma4_unified_text": (),
}
# reduced width: the keys set on top of a config to make it small (experts and windows kept in
# kind, fewer and narrower)
SMALL = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
             intermediate_size=176, vocab_size=1000, max_position_embeddings=1024,
             pad_token_id=0, bos_token_id=1, eos_token_id=2)
SMALL_MOE = dict(moe_intermediate_size=32, n_routed_experts=8, num_experts_per_tok=2)
# MLA's widths (its K and V come for every head from the latent: H_kv = H)
SMALL_MLA = dict(kv_lora_rank=32, q_lora_rank=24, qk_nope_head_dim=16, qk_rope_head_dim=8,
                 v_head_dim=16, num_key_value_heads=SMALL["num_attention_heads"])
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
    if "moe_num_experts" in cfg:  # ERNIE 4.5: its own keys; the last MoE layer moved inside
        end = cfg.get("moe_layer_end_index", -1)
        out.update(moe_num_experts=8, moe_k=2, moe_intermediate_size=32,
                   moe_num_shared_experts=min(cfg.get("moe_num_shared_experts") or 0, 1),
                   moe_layer_end_index=-1 if end == -1 else min(end, LAYERS - 2))
    if "moe_topk" in cfg:  # Hunyuan: E is num_experts, k moe_topk, experts intermediate_size wide
        for k in ("n_routed_experts", "num_experts_per_tok", "moe_intermediate_size",
                  "num_shared_expert"):
            out.pop(k, None)
        out.update(num_experts=8, moe_topk=2)
    if "kv_lora_rank" in cfg:
        out.pop("head_dim")  # MLA classes alias head_dim to qk_rope_head_dim
        out.update(SMALL_MLA, q_lora_rank=None if cfg.get("q_lora_rank") is None else 24)
        rope = out.get("rope_parameters")
        if isinstance(rope, dict) and "partial_rotary_factor" in rope:  # Mistral 4: RoPE's share
            nope, rot = SMALL_MLA["qk_nope_head_dim"], SMALL_MLA["qk_rope_head_dim"]
            out["rope_parameters"] = {**rope, "partial_rotary_factor": rot / (nope + rot)}
    heads = cfg.get("num_attention_heads_per_layer")
    if model_type == "laguna" and isinstance(heads, list):  # H's layers 4 heads, the others 6
        out["num_attention_heads_per_layer"] = [
            SMALL["num_attention_heads"] if x == cfg["num_attention_heads"] else 6
            for x in heads[:LAYERS]]
    if model_type == "laguna":  # its shared MLP, narrower than the dense one
        out["shared_expert_intermediate_size"] = 48
    if isinstance(out.get("mlp_layer_types"), list):
        out["mlp_layer_types"] = out["mlp_layer_types"][:LAYERS]
    if cfg.get("v_head_dim") and "kv_lora_rank" not in cfg:  # MiMo: a value head narrower
        out["v_head_dim"] = SMALL["head_dim"] // 2
    if out.get("sliding_window"):
        out["sliding_window"] = WINDOW
    if isinstance(out.get("no_rope_layers"), list):
        out["no_rope_layers"] = out["no_rope_layers"][:LAYERS]
    for k in ("layer_types", "mlp_layer_types"):
        if isinstance(out.get(k), list):
            out[k] = out[k][:LAYERS]
    if "global_head_dim" in cfg or "per_layer_config" in cfg:  # Gemma 4: the global layers'
        out.pop("per_layer_config", None)  # width, re-folded by the class at 8 layers
        out["global_head_dim"] = 2 * SMALL["head_dim"]
        if cfg.get("hidden_size_per_layer_input"):
            out.update(hidden_size_per_layer_input=8,
                       vocab_size_per_layer_input=SMALL["vocab_size"])
    for k in ("architectures", "torch_dtype", "dtype", "transformers_version", "model_type",
              "auto_map", "quantization_config"):
        out.pop(k, None)
    return out


def _meta_params(cfg) -> int:
    with torch.device("meta"):
        model = _build(cfg)
    return int(sum(p.numel() for p in model.parameters()))


def window_bytes(cfg, cache, seq: int) -> int:
    """The cache's bytes with each sliding layer at min(T, W) tokens: per layer, its keys' and
    values' bytes per token (MLA's latent and rope key differ in width) × the tokens kept."""
    total = 0
    for layer in cache.layers:
        per_token = sum(t.numel() * t.element_size() for t in (layer.keys, layer.values)) \
            // layer.keys.shape[-2]
        sliding = type(layer).__name__ == "DynamicSlidingWindowLayer"
        total += (min(seq, cfg.sliding_window) if sliding else seq) * per_token
    return total


def measure_case(name: str, model_type: str, kwargs: dict, seq: int) -> dict:
    cfg = AutoConfig.for_model(model_type, **kwargs)
    torch.manual_seed(0)
    moe = any(k in kwargs for k in (*EXPERT_KEYS, "moe_num_experts"))
    extra = dict(experts_implementation="eager") if moe else {}
    model = _build(cfg, attn_implementation="eager", dtype=torch.float32, **extra).eval()
    steps = forward_steps(model, model.config.vocab_size, 1, seq, last=False,
                          at_cache=lambda c: window_bytes(model.config, c, seq))
    hf_config = config_to_json_dict(model.config)
    hf_config.pop("experts_implementation", None)
    return {
        "name": name, "model_type": model_type, "hf_config": hf_config, "batch": 1, "seq": seq,
        "prefill_flops": steps["prefill"][0], "decode_flops": steps["decode"][0],
        "prefill_ops": steps["prefill"][1], "decode_ops": steps["decode"][1],
        "params": int(sum(p.numel() for p in model.parameters())),
        "kv_cache_bytes_window_W": int(steps["at_cache"]),
        "kv_cache_bytes_hf": int(steps["kv"][0]),
    }


def _class_defaults(mt: str) -> tuple[dict | None, str | None]:
    """The config class's defaults as transformers writes them, or why transformers itself
    cannot build a model from them (Dots1Config leaves n_routed_experts None)."""
    cfg = AutoConfig.for_model(mt)
    try:
        _meta_params(cfg)
    except Exception as e:  # the class's own defaults fail in its own modeling code
        return None, f"{type(e).__name__}: {e}".splitlines()[0]
    return config_to_json_dict(cfg), None


def measure(only: set[str] | None = None, old: dict | None = None) -> dict:
    params, cases, unbuildable = {}, [], {}
    if old is not None and only:  # keep the other families' entries as they were measured
        params = {k: v for k, v in old["params"].items() if v["model_type"] not in only}
        cases = [c for c in old["cases"] if c["model_type"] not in only]
        unbuildable = {k: v for k, v in old.get("unbuildable", {}).items() if k not in only}
    for mt, presets in PRESETS.items():
        if only and mt not in only:
            continue
        configs = {}
        for preset in presets:
            with open(os.path.join(HF_DIR, f"{preset}.json")) as f:
                configs[preset] = json.load(f)
        defaults, why = _class_defaults(mt)
        if why is None:
            configs[f"{mt}-class-defaults"] = defaults
        else:
            unbuildable[mt] = {"hf_config": config_to_json_dict(AutoConfig.for_model(mt)),
                               "error": why}
        for name, cfg in configs.items():
            params[name] = {"model_type": mt, "hf_config": cfg, "params_meta": _meta_params(
                AutoConfig.for_model(mt, **{k: v for k, v in cfg.items()
                                            if k != "model_type"}))}
            for seq in SEQS:
                cases.append(measure_case(f"{name}-small-T{seq}", mt, _small(mt, cfg), seq))
                print(f"{cases[-1]['name']}: prefill {cases[-1]['prefill_flops']:,} "
                      f"decode {cases[-1]['decode_flops']:,}", file=sys.stderr)
    return {
        "torch": torch.__version__, "transformers": transformers.__version__,
        "how": __doc__, "params": params, "cases": cases,
        # families whose class defaults transformers cannot build: the error it raises
        "unbuildable": unbuildable,
    }


def main(argv: list[str]) -> int:
    out = argv[argv.index("--out") + 1] if "--out" in argv else DEFAULT_OUT
    only = set(argv[argv.index("--only") + 1].split(",")) if "--only" in argv else None
    old = None
    if only and os.path.exists(out):
        with open(out) as f:
            old = json.load(f)
    data = measure(only, old)
    with open(out, "w") as f:
        json.dump(data, f, indent=1, sort_keys=False)
        f.write("\n")
    print(f"{len(data['cases'])} cases, {len(data['params'])} configs → {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
