#!/usr/bin/env python3
"""Measure Llama 4 text models with PyTorch and write ``tests/data/llama4_reference.json``.

Run manually (the test suite only reads the JSON; a live test imports `measure_case`):

    pip install torch==2.13.0+cpu transformers==5.24.0
    python tests/torch_reference/measure_llama4.py [--out PATH]

Two parts:

  * ``cases``: tiny ``llama4_text`` models (random weights, float32, eager attention, CPU, B=5,
    chunk size C=4 smaller than T so that chunks matter, RoPE and NoPE layers, the L2 q/k norm,
    the attention temperature, dense and MoE layers with real routing: the router weights are
    redrawn from N(0, 1)). Each is measured with ``torch.utils.flop_counter.FlopCounterMode``
    twice: as transformers runs it (``Llama4TextMoe`` runs EVERY expert on every token, its input
    scaled by a router score that is 0 for the experts not chosen: ``hf_*_flops``) and with the
    MoE forward replaced by the routed one engines run (each expert only on the tokens routed to
    it; its output is asserted equal to transformers' own: ``routed_*_flops``). The KV cache
    transformers holds after the prefill is recorded per layer (chunked layers keep a sliding
    window of C−1 tokens there), next to the chunk's tokens that vLLM keeps.
  * ``published``: the real config.json files in ``tests/data/hf`` (multimodal ``llama4``) built
    on the meta device: the text model (``Llama4ForCausalLM`` of ``text_config``), and the whole
    ``Llama4ForConditionalGeneration`` with its vision tower and projector.
"""

from __future__ import annotations

import inspect
import json
import os
import sys
import types

import torch
from transformers import AutoConfig, AutoModelForCausalLM, Llama4ForConditionalGeneration
from transformers.models.llama4 import modeling_llama4

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from measure_flops import cache_bytes, check_roundtrip, config_to_json_dict, run
from measure_moe import count, meta_params, randomize_routers

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_OUT = os.path.join(REPO_ROOT, "tests", "data", "llama4_reference.json")
HF_DIR = os.path.join(REPO_ROOT, "tests", "data", "hf")

B, C, V = 5, 4, 1000
_TINY = dict(
    hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=24,
    num_hidden_layers=4, vocab_size=V, max_position_embeddings=256, intermediate_size=32,
    intermediate_size_mlp=96, num_local_experts=6, num_experts_per_tok=2,
    interleave_moe_layer_step=2, attention_chunk_size=C, use_qk_norm=True,
    attn_temperature_tuning=True, tie_word_embeddings=False,
)
# (name, T, config): T = 11 ≡ C−1 (mod C), where transformers' chunked cache (C−1 tokens) holds
# exactly the current chunk, so its decode reads the same keys as vLLM's; T = 10, where it holds
# one token more, which the chunk mask then hides.
CASES = [
    ("llama4_c4_t11", 11, _TINY),
    ("llama4_c4_t10", 10, _TINY),
    ("llama4_all_moe_k1_t11", 11, dict(_TINY, interleave_moe_layer_step=1, num_experts_per_tok=1,
                                       use_qk_norm=False)),
]
SEQ = {name: t for name, t, _ in CASES}

PUBLISHED = {
    "llama4-scout": dict(
        repo="meta-llama/Llama-4-Scout-17B-16E", figure="17B active, 109B total parameters",
        source="Meta, Llama 4 model card (Apr 2025) and 'The Llama 4 herd' blog post. The 109B "
        "counts the vision encoder and projector: the whole Llama4ForConditionalGeneration is "
        "params_meta_full; shapecalc counts the text model (params_meta)."),
    "llama4-maverick": dict(
        repo="meta-llama/Llama-4-Maverick-17B-128E", figure="17B active, 400B total parameters",
        source="Meta, Llama 4 model card (Apr 2025) and 'The Llama 4 herd' blog post. The text "
        "model (params_meta) is 400.7B; with the vision encoder and projector "
        "(params_meta_full) 401.6B."),
}


def routed_moe_forward(self, hidden_states):
    """Llama4TextMoe as engines run it (vLLM's Llama4MoE): each expert only on the tokens routed
    to it, its input scaled by sigmoid(logit) as transformers scales it."""
    x = hidden_states.reshape(-1, self.hidden_dim)
    logits = self.router(x)[1]
    top, idx = torch.topk(logits, self.top_k, dim=1)
    w = torch.sigmoid(top.float()).to(x.dtype)
    out = self.shared_expert(x)
    ex = self.experts
    for e in range(self.num_experts):
        tok, slot = torch.nonzero(idx == e, as_tuple=True)
        if tok.numel() == 0:
            continue
        xin = x[tok] * w[tok, slot, None]
        gate, up = (xin @ ex.gate_up_proj[e]).chunk(2, dim=-1)
        out.index_add_(0, tok, (up * ex.act_fn(gate)) @ ex.down_proj[e])
    return out, logits


def kv_tokens(cache) -> list[int]:
    return [int(layer.keys.shape[-2]) for layer in cache.layers]


def measure_case(name: str, model_type: str, kwargs: dict) -> dict:
    T = SEQ[name]
    cfg = AutoConfig.for_model(model_type, **kwargs)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager",
                                             dtype=torch.float32)
    model.eval()
    randomize_routers(model)
    cfg = model.config
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, V, (B, T), generator=g)
    nxt = torch.randint(0, V, (B, 1), generator=g)
    kw = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    moes = [m for m in model.modules() if isinstance(m, modeling_llama4.Llama4TextMoe)]

    def run_all(tag: str) -> dict:
        out: dict = {}
        res = {}
        res["prefill"] = count(lambda: out.setdefault("p", model(ids, use_cache=False)))
        res["prefill_last"] = count(lambda: model(ids, use_cache=False, logits_to_keep=1))
        pre = model(ids, use_cache=True)
        cache = getattr(pre, "cache", None) or pre.past_key_values
        out["kv_tokens"] = kv_tokens(cache)
        out["kv_bytes"] = cache_bytes(cache)[0]
        out["cache_layers"] = [type(layer).__name__ for layer in cache.layers]
        res["decode"] = count(lambda: out.setdefault("d", model(nxt, use_cache=True,
                                                               **{kw: cache})))
        return {"out": out, **{f"{tag}_{k}_flops": v[0] for k, v in res.items()},
                **{f"{tag}_{k}_modules": v[2] for k, v in res.items()}}

    with torch.no_grad():
        hf = run_all("hf")
        for m in moes:  # the routed forward, on the same weights
            m.forward = types.MethodType(routed_moe_forward, m)
        routed = run_all("routed")
    # the routed forward computes what transformers' dense one does
    assert torch.allclose(hf["out"]["p"].logits, routed["out"]["p"].logits, atol=1e-4)
    assert torch.allclose(hf["out"]["d"].logits, routed["out"]["d"].logits, atol=1e-4)

    hf_config = config_to_json_dict(cfg)
    check_roundtrip(cfg, hf_config)
    n_params = int(sum(p.numel() for p in model.parameters()))
    assert meta_params(AutoConfig.for_model(**hf_config)) == n_params
    chunked = [t == "chunked_attention" for t in cfg.layer_types]
    D, H, Dh = cfg.hidden_size, cfg.num_attention_heads, cfg.head_dim
    Hkv, F, E, k = cfg.num_key_value_heads, cfg.intermediate_size, cfg.num_local_experts, \
        cfg.num_experts_per_tok
    moe_layers = len(moes)
    # what the dense experts add: E − k more expert FFNs per token and MoE layer
    dense_extra = {ph: 2 * (E - k) * B * tq * 3 * D * F * moe_layers
                   for ph, tq in (("prefill", T), ("prefill_last", T), ("decode", 1))}
    # the chunk's tokens (vLLM) after the prefill, and the keys a decode query reads
    chunk_after_prefill = (T - 1) % C + 1
    chunk_decode_keys = T % C + 1
    hf_decode_keys = min(T, C - 1) + 1
    kv_vllm = [chunk_after_prefill if c else T for c in chunked]
    return {
        "name": name,
        "model_type": model_type,
        "hf_config": hf_config,
        "batch": B,
        "seq": T,
        "chunk": C,
        "layer_types": list(cfg.layer_types),
        "no_rope_layers": list(cfg.no_rope_layers),
        "moe_layers": list(cfg.moe_layers),
        **{k: v for k, v in hf.items() if k != "out"},
        **{k: v for k, v in routed.items() if k != "out"},
        "moe_dense_extra_flops": dense_extra,
        "hf_cache_layers": hf["out"]["cache_layers"],
        "hf_kv_tokens_after_prefill": hf["out"]["kv_tokens"],
        "hf_kv_bytes_after_prefill": hf["out"]["kv_bytes"],
        "vllm_kv_tokens_after_prefill": kv_vllm,
        "vllm_kv_bytes_after_prefill": sum(kv_vllm) * 2 * B * Hkv * Dh * 4,
        "decode_keys_chunked": {"transformers": hf_decode_keys, "vllm": chunk_decode_keys},
        "decode_attention_extra_flops": sum(chunked) * 2 * 2 * B * H * Dh
        * (hf_decode_keys - chunk_decode_keys),
        "params": n_params,
        "params_meta": n_params,
    }


def measure_published() -> dict:
    out = {}
    for stem, meta in PUBLISHED.items():
        path = os.path.join(HF_DIR, f"{stem}.json")
        with open(path) as f:
            raw = json.load(f)
        cfg = AutoConfig.from_pretrained(path)
        with torch.device("meta"):
            full = Llama4ForConditionalGeneration(cfg)
            text = AutoModelForCausalLM.from_config(cfg.text_config)

        def n(m) -> int:
            return int(sum(p.numel() for p in m.parameters()))

        out[stem] = {
            "file": os.path.relpath(path, REPO_ROOT),
            "repo": meta["repo"],
            "model_type": raw["model_type"],
            "text_model_type": raw["text_config"]["model_type"],
            "text_class": type(text).__name__,
            "params_meta": n(text),
            "params_meta_full": n(full),
            "params_vision_model": n(full.vision_model),
            "params_projector": n(full.multi_modal_projector),
            "params_published": None,  # Meta publishes rounded figures only
            "figure": meta["figure"],
            "source": meta["source"],
        }
    return out


HOW = (
    "cases: tiny llama4_text models, AutoModelForCausalLM.from_config(cfg, "
    "attn_implementation='eager', dtype=torch.float32) after torch.manual_seed(0); every router "
    "weight redrawn from N(0,1) (torch.Generator seed 1). eval(), no_grad, CPU, B=5, T=seq, "
    "attention_chunk_size C=4. FLOPs: FlopCounterMode(display=False).get_total_flops() (matmuls "
    "only, 2*m*k*n). prefill: model(ids[B,T], use_cache=False); prefill_last: logits_to_keep=1; "
    "decode: model(next[B,1], cache=<DynamicCache of a prefill>, use_cache=True). hf_*: "
    "transformers' own Llama4TextMoe, which runs every expert on every token (its input times a "
    "router score that is 0 for the experts not chosen): moe_dense_extra_flops = "
    "2*(E-k)*B*Tq*3*D*Dff_e per MoE layer more than the routed work. routed_*: the same model "
    "with Llama4TextMoe.forward replaced by routed_moe_forward (each expert only on its tokens, "
    "input scaled by sigmoid of the top-k logit, as vLLM runs it); its logits equal "
    "transformers' (asserted). hf_kv_*_after_prefill: the DynamicCache after the prefill "
    "(chunked_attention layers are DynamicSlidingWindowLayer(sliding_window=C): they keep the "
    "last min(T, C-1) tokens); vllm_kv_*: the tokens of the current chunk, ((T-1) mod C)+1, on "
    "chunked layers (vLLM's chunked local attention frees the blocks before the chunk). "
    "decode_keys_chunked: keys a decode query multiplies on a chunked layer: transformers "
    "min(T, C-1)+1 (the chunk mask hides the ones of the chunk before), vLLM (T mod C)+1; "
    "decode_attention_extra_flops: what the difference costs in QK^T and AV over the chunked "
    "layers. published: each config.json in tests/data/hf read with AutoConfig.from_pretrained; "
    "params_meta = the text model (AutoModelForCausalLM.from_config(cfg.text_config): "
    "Llama4ForCausalLM) on the meta device; params_meta_full = Llama4ForConditionalGeneration(cfg) "
    "on the meta device, with params_vision_model and params_projector its parts."
)


def main(argv=None) -> int:
    def show(c: dict) -> str:
        return (f"hf prefill={c['hf_prefill_flops']:,d} "
                f"routed prefill={c['routed_prefill_flops']:,d} "
                f"routed decode={c['routed_decode_flops']:,d} params={c['params']:,d}")

    cases = [(name, "llama4_text", kwargs) for name, _, kwargs in CASES]  # T: SEQ[name]
    return run(argv, __doc__.splitlines()[0], DEFAULT_OUT, cases, measure_case, show, HOW,
               published=measure_published)


if __name__ == "__main__":
    sys.exit(main())
