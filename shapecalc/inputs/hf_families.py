"""The table of Hugging Face families: one entry per model_type, as transformers 5.24 defines it
(its config class's defaults and attribute map, the mechanisms its modeling file is built from,
the keys it refuses and why, the keys it ignores).

A family that brings no new mechanism is one entry here (and its reference data in tests/). The
generic reader (hf.py) runs an entry's mechanisms in order on the config, sets its `fixed`
fields, then audits the keys the entry leaves unread (hf_keys.py).
"""

from __future__ import annotations

from typing import Any

from . import hf_alibi as alibi
from . import hf_classic as classic
from . import hf_deepseek as deepseek
from . import hf_gemma as gemma
from . import hf_llama as llama
from . import hf_moe as moe
from .hf_base import Family, Refusal
from .hf_llama4 import llama4

SILU = llama.gated("hidden_act")
BODY = (llama.llama, SILU, llama.table)  # the Llama-like body, its activation, its tables


def _llama(kv: int | None, positions: int, tied: bool = False, act: str = "silu",
           **more: Any) -> dict[str, Any]:
    """A Llama-like class's defaults: KV heads (None: H), max positions, tied embeddings, the
    activation, and the rest."""
    return dict(num_key_value_heads=kv, max_position_embeddings=positions,
                tie_word_embeddings=tied, hidden_act=act, **more)


_QWEN_WINDOW: dict[str, Any] = dict(use_sliding_window=False, sliding_window=4096,
                                    max_window_layers=28)
_MLA: dict[str, Any] = dict(kv_lora_rank=512, q_lora_rank=1536, qk_nope_head_dim=128,
                            qk_rope_head_dim=64, v_head_dim=128)
_MOE_FREQ = Refusal((1,), "{value}: MoE on every k-th layer only is read by DeepSeek's remote "
                    "code, not by transformers; shapecalc follows transformers (1)", 1)


def _deepseek(mt: str, scoring: str, v2: bool) -> Family:
    defaults = _llama(None, 2048, **_MLA) if v2 else _llama(128, 4096, **_MLA)
    defaults.update(
        dict(n_routed_experts=64, num_experts_per_tok=None, moe_intermediate_size=1407,
             n_shared_experts=2, first_k_dense_replace=0, routed_scaling_factor=1.0,
             norm_topk_prob=False, scoring_func="softmax", topk_method="greedy") if v2 else
        dict(n_routed_experts=256, num_experts_per_tok=8, moe_intermediate_size=2048,
             n_shared_experts=1, first_k_dense_replace=3, routed_scaling_factor=2.5,
             norm_topk_prob=True, scoring_func="sigmoid"))
    refuse = {"moe_layer_freq": _MOE_FREQ, "scoring_func": Refusal(
        (scoring,), f"{{value!r}}: transformers' {mt} router always scores with {scoring}")}
    if v2:
        refuse.update(
            topk_method=Refusal(("greedy", "group_limited_greedy"), "{value!r} is not one of "
                                "greedy, group_limited_greedy (DeepSeek-V2's router)"),
            norm_topk_prob=Refusal((False,), "true, but transformers' DeepSeek-V2 router never "
                                   "renormalises the top-k weights"))
    what = ("DeepSeek-V2: MLA, DeepSeekMoE (softmax routing, shared experts)" if v2 else
            "DeepSeek-V3 layout: MLA, sigmoid noaux_tc routing, dense first layers")
    return Family(mt, what, (*BODY, deepseek.mla, deepseek.deepseek_moe,
                             *((llama.mlp_bias,) if v2 else ())), defaults,
                  aliases={"n_routed_experts": ("num_local_experts", "num_experts")},
                  refuse=refuse)


_GEMMA_ACT = llama.gated("hidden_activation")
_GEMMA_FIXED = dict(embedding_scale=True)  # hidden_states · √hidden_size

FAMILIES: dict[str, Family] = {f.model_type: f for f in (
    Family("llama", "Llama 2/3: GQA, SwiGLU, RMSNorm, RoPE",
           (*BODY, llama.attention_bias, llama.mlp_bias), _llama(None, 2048)),
    # MistralAttention/MistralMLP use bias=False
    Family("mistral", "Mistral: Llama with a sliding window", (*BODY, llama.sliding),
           _llama(8, 4096 * 32, sliding_window=4096)),
    # q, k, v have biases; o_proj and the MLP do not
    Family("qwen2", "Qwen2/2.5: q, k, v biases, optional sliding layers",
           (*BODY, llama.qwen_windows), _llama(32, 32768, **_QWEN_WINDOW),
           fixed=dict(qkv_bias=True)),
    Family("gemma", "Gemma: GeGLU, √D embedding scale, tied",
           (llama.llama, gemma.gemma_act, llama.table, llama.attention_bias),
           _llama(16, 8192, True, "gelu_pytorch_tanh", head_dim=256), fixed=_GEMMA_FIXED),
    # one qkv_proj and one gate_up_proj matrix, no biases
    Family("phi3", "Phi-3: fused qkv and gate_up, optional sliding window",
           (*BODY, llama.sliding), _llama(None, 4096, sliding_window=None),
           fixed=dict(fused_qkv=True)),
    Family("qwen3", "Qwen3: q/k RMSNorm per head, head_dim 128",
           (*BODY, llama.qk_norm, llama.qwen_windows),
           _llama(32, 32768, head_dim=128, **_QWEN_WINDOW)),
    # the router: softmax over E, top k, the k weights renormalised (always)
    Family("mixtral", "Mixtral: Mistral with top-2 of 8 experts",
           (*BODY, llama.sliding, moe.experts("num_local_experts")),
           _llama(8, 4096 * 32, sliding_window=None, num_local_experts=8,
                  num_experts_per_tok=2),
           aliases={"num_local_experts": ("num_experts",)}, fixed=dict(norm_topk_prob=True)),
    # LlamaAttention with attention_bias on q, k, v and o; nn.LayerNorm (γ and β) everywhere;
    # lm_head_bias. The router's sparsemixer picks k=2 by masked softmaxes: softmax scoring,
    # the weights not renormalised (its costs are counted as a softmax router's)
    Family("phimoe", "Phi-3.5-MoE: LayerNorm, biases, top-2 of 16 experts",
           (*BODY, llama.attention_bias, moe.lm_head_bias, llama.sliding,
            moe.experts("num_local_experts")),
           _llama(8, 4096 * 32, sliding_window=None, num_local_experts=16,
                  num_experts_per_tok=2), fixed=dict(norm="layernorm")),
    Family("qwen2_moe", "Qwen1.5/2-MoE: shared expert with a sigmoid gate",
           (*BODY, moe.qkv_bias, moe.qwen2_moe_windows, moe.qwen_sparse,
            moe.experts("num_experts", "moe_intermediate_size", optional=True),
            moe.norm_topk, moe.qwen_shared),
           _llama(16, 32768, qkv_bias=True, num_experts=60, num_experts_per_tok=4,
                  moe_intermediate_size=1408, shared_expert_intermediate_size=5632,
                  norm_topk_prob=False, decoder_sparse_step=1, **_QWEN_WINDOW)),
    # head_dim has no class default (absent: D/H); no shared expert
    Family("qwen3_moe", "Qwen3-MoE: q/k norms, 128 experts, top-8",
           (*BODY, llama.qk_norm, moe.qwen_sliding, moe.qwen_sparse,
            moe.experts("num_experts", "moe_intermediate_size", optional=True), moe.norm_topk),
           _llama(4, 32768, num_experts=128, num_experts_per_tok=8, moe_intermediate_size=768,
                  norm_topk_prob=False, decoder_sparse_step=1, use_sliding_window=False,
                  sliding_window=4096),
           aliases={"num_experts": ("num_local_experts",)},
           # Qwen3MoeAttention: with use_sliding_window every layer slides
           ignored=frozenset({"max_window_layers", "layer_types"})),
    # a learned sink logit per head; the router [D→E] has a bias, takes the top k logits and
    # softmaxes those k (the same weights as a softmax over E renormalised over the k); the
    # experts (with biases) apply a clamped SwiGLU whatever hidden_act says (swiglu_alpha,
    # swiglu_limit change no shape). quantization_config (MXFP4 experts) is the weights'
    # storage: choose it with --dtype.
    Family("gpt_oss", "gpt-oss: alternating sliding/full, sinks, biased experts",
           (llama.llama, llama.table, llama.attention_bias, llama.alternating, moe.gpt_oss_k,
            moe.experts("num_local_experts")),
           dict(num_key_value_heads=8, max_position_embeddings=131072,
                tie_word_embeddings=False, head_dim=64, attention_bias=True, sliding_window=128,
                num_local_experts=128, num_experts_per_tok=4),
           aliases={"num_local_experts": ("num_experts",)},
           fixed=dict(attention_sinks=True, ffn="swiglu", router_bias=True, expert_bias=True,
                      norm_topk_prob=True)),
    Family("llama4_text", "Llama 4: chunked and NoPE layers, sigmoid top-1 MoE + shared",
           (*BODY, llama4), _llama(
               8, 4096 * 32, head_dim=128, intermediate_size_mlp=16384,
               attention_chunk_size=8192, no_rope_layer_interval=4, use_qk_norm=True,
               attn_temperature_tuning=True, num_local_experts=16, num_experts_per_tok=1,
               interleave_moe_layer_step=1)),
    _deepseek("deepseek_v2", "softmax", v2=True),
    _deepseek("deepseek_v3", "sigmoid", v2=False),
    _deepseek("kimi_k2", "sigmoid", v2=False),  # the V3 architecture, as transformers maps it
    # Gemma2Config: alternate local (even i) and global; softcapping 50 on the scores and 30 on
    # the logits by default (null: none)
    Family("gemma2", "Gemma 2: sandwich norms, local/global 1:1, softcaps",
           (llama.llama, _GEMMA_ACT, llama.table, llama.attention_bias, gemma.local_global(2),
            gemma.softcaps, gemma.rope_theta),
           _llama(4, 8192, True, head_dim=256, hidden_activation="gelu_pytorch_tanh",
                  query_pre_attn_scalar=256, sliding_window=4096, attn_logit_softcapping=50.0,
                  final_logit_softcapping=30.0, rope_theta=10000.0),
           fixed=_GEMMA_FIXED,
           widths=dict(vocab_size=256000, hidden_size=2304, intermediate_size=9216,
                       num_hidden_layers=26, num_attention_heads=8)),
    # Gemma3TextConfig: 5 local : 1 global (sliding_window_pattern 6), q/k RMSNorm per head
    # ((1+γ) too), RoPE θ 1 000 000 on global and 10 000 on local layers; no softcapping unless
    # given. Widths a multimodal Gemma 3's text_config leaves out (the 4B gives no head counts,
    # the 27B no vocab_size) are the class's.
    Family("gemma3_text", "Gemma 3: 5 local : 1 global, q/k norms, two RoPE θ",
           (llama.llama, _GEMMA_ACT, llama.table, llama.attention_bias,
            gemma.local_global(None), gemma.softcaps, gemma.rope_theta_local),
           _llama(4, 131072, True, head_dim=256, hidden_activation="gelu_pytorch_tanh",
                  query_pre_attn_scalar=256, sliding_window=4096, sliding_window_pattern=6,
                  rope_theta=1_000_000.0, rope_local_base_freq=10_000.0),
           fixed=dict(**_GEMMA_FIXED, qk_norm=True),
           widths=dict(vocab_size=262208, hidden_size=2304, intermediate_size=9216,
                       num_hidden_layers=26, num_attention_heads=8)),
    # Olmo2DecoderLayer: no pre-norms; post_attention_layernorm and post_feedforward_layernorm
    # norm each output before the residual add; q_norm over H·Dh and k_norm over H_kv·Dh, on the
    # projections before the heads split
    Family("olmo2", "OLMo 2: output norms, whole-width q/k norms",
           (*BODY, llama.attention_bias, gemma.rope_theta), _llama(None, 2048, rope_theta=10000.0),
           fixed=dict(norm_position="output", qk_norm=True, qk_norm_width="all"),
           widths=dict(vocab_size=50304, hidden_size=4096, intermediate_size=11008,
                       num_hidden_layers=32, num_attention_heads=32)),
    Family("gpt2", "GPT-2: learned positions, LayerNorm, fused c_attn, biases",
           (classic.gpt2,), dict(add_cross_attention=False, activation_function="gelu_new",
                                 n_positions=1024, tie_word_embeddings=True)),
    Family("falcon", "Falcon: MQA/GQA, parallel attention and MLP",
           (classic.falcon,), dict(alibi=False, new_decoder_architecture=False,
                                   parallel_attn=True, bias=False, multi_query=True,
                                   activation="gelu", max_position_embeddings=2048,
                                   tie_word_embeddings=True),
           aliases={"hidden_size": ("n_embed",), "num_attention_heads": ("n_head",),
                    "num_hidden_layers": ("n_layer",)}),
    Family("opt", "OPT: learned positions (offset 2), ReLU, pre- or post-norm",
           (classic.opt,), dict(layer_norm_elementwise_affine=True, do_layer_norm_before=True,
                                _remove_final_layer_norm=False, enable_bias=True,
                                activation_function="relu", tie_word_embeddings=True)),
    Family("gpt_neox", "GPT-NeoX/Pythia: partial rotary, parallel residual",
           (classic.gpt_neox,), dict(attention_bias=True, use_parallel_residual=True,
                                     hidden_act="gelu", max_position_embeddings=2048,
                                     tie_word_embeddings=False)),
    Family("gptj", "GPT-J: interleaved partial rotary, parallel block",
           (classic.gptj,), dict(rotary_dim=64, activation_function="gelu_new",
                                 tie_word_embeddings=False, max_position_embeddings=2048),
           aliases={"n_embd": ("hidden_size",), "n_head": ("num_attention_heads",),
                    "n_layer": ("num_hidden_layers",)}),
    Family("phi", "Phi-2: partial rotary, parallel block, biases",
           (classic.phi,), dict(qk_layernorm=False, hidden_act="gelu_new",
                                max_position_embeddings=2048, tie_word_embeddings=False),
           refuse={"qk_layernorm": Refusal((False,), "Phi's q/k LayerNorm (γ and β of Dh, "
                                           "shared by the heads) is not modelled")}),
    Family("stablelm", "StableLM: LayerNorm, partial rotary, optional q/k norms",
           (classic.stablelm,), dict(hidden_act="silu", max_position_embeddings=4096,
                                     tie_word_embeddings=False, num_key_value_heads=32,
                                     use_qkv_bias=False, qk_layernorm=False,
                                     use_parallel_residual=False)),
    Family("cohere", "Cohere Command-R: parallel block, γ-only LayerNorm, logit scale",
           (classic.cohere,), dict(logit_scale=0.0625, attention_bias=False, hidden_act="silu",
                                   max_position_embeddings=8192, tie_word_embeddings=True,
                                   use_qk_norm=False)),
    Family("granite", "Granite: Llama with four multipliers",
           (classic.granite,), dict(attention_bias=False, hidden_act="silu",
                                    max_position_embeddings=2048, tie_word_embeddings=False,
                                    mlp_bias=False)),
    Family("bloom", "BLOOM: ALiBi, embedding LayerNorm",
           (alibi.bloom,), dict(pretraining_tp=1, slow_but_exact=False, vocab_size=250880,
                                tie_word_embeddings=True, num_hidden_layers=2,
                                num_attention_heads=8),
           aliases={"hidden_size": ("n_embed",)},
           refuse={"apply_residual_connection_post_layernorm": Refusal(
               (False, None, 0), "{value!r}: the residual taken after the norm is not "
               "modelled")}),
    Family("mpt", "MPT: ALiBi, no biases, β-less LayerNorm",
           (alibi.mpt,), dict(hidden_size=2048, num_attention_heads=16, vocab_size=50368,
                              max_seq_len=2048, tie_word_embeddings=True, num_hidden_layers=24),
           refuse={"no_bias": Refusal((True,), "{value!r}: transformers' MPT layers have no "
                                      "biases whatever no_bias says", True),
                   "logit_scale": Refusal((None,), "{value!r}: transformers' MptForCausalLM "
                                          "does not scale the logits, and shapecalc does not "
                                          "model a scale"),
                   "norm_type": Refusal(("low_precision_layernorm", "layernorm"), "{value!r}: "
                                        "transformers' MPT uses LayerNorm (without β) whatever "
                                        "norm_type says", "low_precision_layernorm")}),
    Family("gpt_bigcode", "GPT-BigCode/StarCoder: MQA with a fused c_attn",
           (alibi.gpt_bigcode,), dict(add_cross_attention=False, multi_query=True,
                                      vocab_size=50257, activation_function="gelu_pytorch_tanh",
                                      tie_word_embeddings=True, max_position_embeddings=1024),
           aliases={"n_embd": ("hidden_size",), "n_head": ("num_attention_heads",),
                    "n_layer": ("num_hidden_layers",)},
           refuse={"scale_attn_weights": Refusal((True,), "{value!r}: unscaled scores (no "
                                                 "1/√Dh) are not modelled", True)}),
    Family("starcoder2", "StarCoder2: sliding window, biases, LayerNorm, GELU MLP",
           (alibi.starcoder2,), dict(hidden_size=3072, num_attention_heads=24, use_bias=True,
                                     vocab_size=49152, num_hidden_layers=30,
                                     num_key_value_heads=2, intermediate_size=12288,
                                     hidden_act="gelu_pytorch_tanh",
                                     max_position_embeddings=4096, tie_word_embeddings=True),
           refuse={"norm_type": Refusal((None, "layer_norm"), "{value!r}: transformers' "
                                        "Starcoder2 uses LayerNorm whatever norm_type says"),
                   "mlp_type": Refusal((None, "default"), "{value!r}: transformers' "
                                       "Starcoder2MLP is c_fc → GELU → c_proj whatever "
                                       "mlp_type says")}),
    # 2025–2026 families: entries over the mechanisms above
    Family("smollm3", "SmolLM3: Llama with every 4th layer NoPE, tied",
           (*BODY, llama.attention_bias, llama.mlp_bias, llama.nope_every),
           _llama(4, 32768, True, use_sliding_window=False, sliding_window=None,
                  no_rope_layer_interval=4, attention_bias=False, mlp_bias=False),
           # the Hub's config.json carries max_window_layers; SmolLM3Config has no such key
           ignored=frozenset({"max_window_layers"}),
           widths=dict(vocab_size=128256, hidden_size=2048, intermediate_size=11008,
                       num_hidden_layers=36, num_attention_heads=16)),
    Family("seed_oss", "Seed-OSS: Llama with q/k/v biases, o_proj's own bias key",
           (*BODY, llama.qkv_bias_only, llama.out_bias, llama.mlp_bias),
           _llama(8, 524288, head_dim=128, attention_bias=True, attention_out_bias=False,
                  mlp_bias=False),
           widths=dict(vocab_size=155136, hidden_size=4096, intermediate_size=27648,
                       num_hidden_layers=64, num_attention_heads=80)),
    Family("glm4_moe", "GLM-4.5/4.6: partial rotary, q/k/v biases, DeepSeek-V3 MoE",
           (*BODY, llama.floor_head_dim, llama.qkv_bias_only, llama.optional_qk_norm,
            llama.partial_rotary, deepseek.deepseek_moe),
           _llama(8, 131072, attention_bias=False, use_qk_norm=False, partial_rotary_factor=0.5,
                  moe_intermediate_size=1408, num_experts_per_tok=8, n_shared_experts=1,
                  n_routed_experts=128, routed_scaling_factor=1.0, first_k_dense_replace=1,
                  norm_topk_prob=True, scoring_func="sigmoid", num_nextn_predict_layers=1),
           aliases={"n_routed_experts": ("num_local_experts",),
                    "num_nextn_predict_layers": ("num_mtp_layers",)},
           refuse={"scoring_func": Refusal(("sigmoid",), "{value!r}: transformers' glm4_moe "
                                           "router always scores with sigmoid")},
           widths=dict(vocab_size=151552, hidden_size=4096, intermediate_size=10944,
                       num_hidden_layers=46, num_attention_heads=96)),
    # Cohere2DecoderLayer: Cohere's parallel block (γ-only LayerNorm, interleaved RoPE, logit
    # scale); 3 sliding layers to 1 full (sliding_window_pattern 4), RoPE on the sliding layers
    # only. Cohere2Config always sets head_dim (a given one wins, else D // H)
    Family("cohere2", "Command R7B: Cohere's parallel block, 3 sliding : 1 NoPE global",
           (classic.cohere2, llama.window_pattern, llama.nope_full(False)),
           dict(logit_scale=0.0625, attention_bias=False, hidden_act="silu",
                max_position_embeddings=8192, tie_word_embeddings=True, sliding_window=4096,
                sliding_window_pattern=4, num_key_value_heads=None),
           # the original release's keys, which Cohere2Config keeps and its model ignores
           # (interleaved RoPE and no q/k norms whatever they say)
           ignored=frozenset({"position_embedding_type", "use_qk_norm"})),
    # Exaone4DecoderLayer is OLMo 2's: no pre-norms, each branch's output normed before its
    # residual add; RMSNorm q/k norms per head (Dh, before RoPE); no biases; 3 sliding layers
    # to 1 full, and with a sliding window the full layers apply no RoPE
    Family("exaone4", "EXAONE 4.0: output norms, q/k norms, 3 sliding : 1 NoPE global",
           (*BODY, llama.floor_head_dim, llama.window_pattern, llama.nope_full(True)),
           _llama(32, 2048, sliding_window=4096, sliding_window_pattern=4),
           fixed=dict(norm_position="output", qk_norm=True)),
    # MiniMaxM2Attention (FlexOlmo's): RMSNorms over all of H·Dh and H_kv·Dh on the q and k
    # projections, partial RoPE (rotate_half); Mixtral's block and experts; the router scores
    # with a sigmoid, picks the top k of sigmoid + e_score_correction_bias (a buffer) and
    # renormalises the k sigmoids
    Family("minimax_m2", "MiniMax-M2: whole-width q/k norms, partial RoPE, sigmoid routing",
           (*BODY, llama.rotary_dim_factor, moe.experts("num_local_experts")),
           _llama(8, 196608, head_dim=128, num_local_experts=256, num_experts_per_tok=8),
           aliases={"num_local_experts": ("num_experts",)},
           fixed=dict(qk_norm=True, qk_norm_width="all", router_scoring="sigmoid",
                      norm_topk_prob=True),
           refuse={"scoring_func": Refusal(("sigmoid",), "{value!r}: transformers' minimax_m2 "
                                           "router always scores with sigmoid", "sigmoid"),
                   "use_qk_norm": Refusal((True,), "{value!r}: transformers' minimax_m2 always "
                                          "builds its q/k norms", True)}),
    # HYV3: Apertus' attention (RMSNorm q/k norms per head before RoPE; attention_bias on q, k,
    # v, o), Llama's MLP (mlp_bias) on the dense layers and as the shared expert; Qwen3-MoE's
    # experts; a sigmoid router [D→E] (no bias) picks the top k of sigmoid + a correction bias (a
    # buffer), renormalises them and scales them by router_scaling_factor
    Family("hy_v3", "Hy3: q/k norms, sigmoid top-8 of 192 experts + a shared expert",
           (*BODY, llama.qk_norm, llama.mlp_bias, moe.mlp_layer_types(False),
            moe.experts("num_experts", "moe_intermediate_size"),
            moe.shared_mlp("router_scaling_factor", True)),
           _llama(8, 131072, head_dim=128, attention_bias=False, mlp_bias=False, num_experts=192,
                  num_experts_per_tok=8, num_shared_experts=1, moe_intermediate_size=1536,
                  router_scaling_factor=2.826),
           aliases={"num_experts": ("num_local_experts",)},
           fixed=dict(router_scoring="sigmoid", norm_topk_prob=True)),
    # ExaoneMoeDecoderLayer: pre-norms (OLMoE's), EXAONE 4's attention (per-head q/k norms, no
    # biases, 3 sliding : 1 full, the full layers NoPE with a window); DeepSeek-V3's MoE under
    # its own keys: sigmoid router [D→E] with a correction bias (a buffer), group-limited
    # (n_group, topk_group: no count changes), renormalised when norm_topk_prob, scaled by
    # routed_scaling_factor; one ungated shared MLP; mlp_layer_types or first_k_dense_replace
    Family("exaone_moe", "K-EXAONE: EXAONE 4's attention, sigmoid MoE + shared, pre-norm",
           (*BODY, llama.floor_head_dim, llama.window_pattern, llama.nope_full(True),
            moe.mlp_layer_types(True), moe.experts("num_experts", "moe_intermediate_size"),
            moe.norm_topk, moe.shared_mlp("routed_scaling_factor", False)),
           _llama(32, 2048, sliding_window=4096, sliding_window_pattern=4,
                  first_k_dense_replace=1, moe_intermediate_size=1024, num_experts=64,
                  num_experts_per_tok=8, num_shared_experts=1, norm_topk_prob=True,
                  routed_scaling_factor=2.5),
           fixed=dict(qk_norm=True, router_scoring="sigmoid"),
           refuse={"scoring_func": Refusal(("sigmoid",), "{value!r}: transformers' exaone_moe "
                                           "router always scores with sigmoid", "sigmoid")}),
    # GraniteSWAAttention: Granite's (four multipliers) with a learned sink logit per head on
    # every layer; every 4th layer full from layer 0, the others slide; a RoPE θ per layer
    # (layer_rope_theta, 0: NoPE)
    Family("granite_swa", "Granite SWA: Granite with sinks, 3 sliding : 1 full, θ per layer",
           (classic.granite, llama.every_kth_full(4, True), classic.layer_rope_theta),
           dict(attention_bias=False, hidden_act="silu", max_position_embeddings=8192,
                tie_word_embeddings=True, mlp_bias=False, num_key_value_heads=4,
                sliding_window=128),
           fixed=dict(attention_sinks=True)),
    # GraniteMoeSWA: Granite SWA's attention (sinks, every 4th layer full from layer 0, θ per
    # layer) over GraniteMoeShared's block: E experts of intermediate_size, a router [D→E]
    # softmaxing its top k logits (the renormalised top k of a softmax), a shared MLP of
    # shared_intermediate_size (0: none); no MLP biases whatever mlp_bias says
    Family("granitemoe_swa", "Granite MoE SWA: sinks, 3 sliding : 1 full, top-k experts",
           (classic.granite, llama.every_kth_full(4, True), classic.layer_rope_theta,
            moe.experts("num_local_experts"), moe.granite_shared),
           dict(attention_bias=False, hidden_act="silu", max_position_embeddings=2048,
                tie_word_embeddings=False, num_key_value_heads=None, sliding_window=128,
                num_local_experts=8, num_experts_per_tok=2, shared_intermediate_size=0),
           aliases={"num_local_experts": ("num_experts",)},
           fixed=dict(attention_sinks=True, norm_topk_prob=True, ffn_bias=False)),
    # AfmoeDecoderLayer: four norms a layer (input, post-attention, pre-MLP, post-MLP); Llama's
    # attention with per-head q/k RMSNorms, an output gate sigmoid(x·W_g) ⊙ attention before
    # o_proj, RoPE on the sliding layers only (3 sliding : 1 full); the first num_dense_layers
    # dense; then a sigmoid router [D→E] choosing by scores + expert_bias (a parameter of E,
    # frozen), the k scores renormalised × route_scale; Qwen2-MoE's experts; one ungated shared
    # MLP of num_shared_experts × moe_intermediate_size; mup_enabled scales the embeddings by √D
    Family("afmoe", "AFMoE: output-gated attention, 3 sliding : 1 NoPE full, sigmoid MoE",
           (*BODY, llama.qk_norm, llama.global_every, llama.nope_full(False), gemma.mup_scale,
            moe.dense_first, moe.experts("num_experts", "moe_intermediate_size"),
            moe.shared_mlp("route_scale", False)),
           _llama(None, 16384, head_dim=128, attention_bias=False, num_dense_layers=1,
                  moe_intermediate_size=1408, num_experts=64, num_experts_per_tok=6,
                  num_shared_experts=2, route_scale=1.0, global_attn_every_n_layers=4,
                  sliding_window=1024, mup_enabled=False),
           fixed=dict(norm_position="sandwich", attn_output_gate=True, routing_bias=True,
                      router_scoring="sigmoid", norm_topk_prob=True)),
)}
SUPPORTED = tuple(sorted(FAMILIES))
# every key each family's reader may read (tests/test_hf_keys.py: no more, no fewer)
READS: dict[str, frozenset[str]] = {mt: f.reads for mt, f in FAMILIES.items()}
