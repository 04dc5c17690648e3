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
from .hf_conv import CONV
from .hf_deltanet import qwen3_5_moe, qwen3_next
from .hf_dots3 import DOTS3
from .hf_families_2025 import NEW
from .hf_hy_v4 import HY_V4
from .hf_inkling import INKLING
from .hf_llama4 import llama4
from .hf_mamba import falcon_h1, granite_hybrid, jamba, nemotron_h
from .hf_zaya import ZAYA

SILU, BODY, _llama = llama.SILU, llama.BODY, llama.class_defaults


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
             norm_topk_prob=True, scoring_func="sigmoid", num_nextn_predict_layers=1))
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
                  aliases={"n_routed_experts": ("num_local_experts", "num_experts"),
                           **({} if v2 else {"num_nextn_predict_layers": ("num_mtp_layers",)})},
                  refuse=refuse)


_GEMMA_ACT = llama.gated("hidden_activation")
_GEMMA_FIXED = dict(embedding_scale=True)  # hidden_states · √hidden_size

FAMILIES: dict[str, Family] = {f.model_type: f for f in (
    # gated DeltaNet : gated attention 3:1; Qwen2-MoE's sparse MoE (a shared expert with its
    # sigmoid gate) on the layers decoder_sparse_step and mlp_only_layers leave
    Family("qwen3_next", "Qwen3-Next: gated DeltaNet and gated attention 3:1, MoE + shared",
           (*BODY, llama.qk_norm, qwen3_next, moe.qwen_sparse,
            moe.experts("num_experts", "moe_intermediate_size", optional=True), moe.norm_topk,
            moe.qwen_shared),
           _llama(2, 32768, head_dim=256, linear_conv_kernel_dim=4, linear_key_head_dim=128,
                  linear_value_head_dim=128, linear_num_key_heads=16, linear_num_value_heads=32,
                  decoder_sparse_step=1, moe_intermediate_size=512,
                  shared_expert_intermediate_size=512, num_experts_per_tok=10, num_experts=512,
                  norm_topk_prob=True, mlp_only_layers=None, layer_types=None,
                  full_attention_interval=4, partial_rotary_factor=0.25, vocab_size=151936,
                  hidden_size=2048, intermediate_size=5632, num_hidden_layers=48,
                  num_attention_heads=16)),
    # Qwen3.5: Qwen3-Next's layers with gated DeltaNet's projections unfused (in_proj_qkv, _z,
    # _b, _a); the text models of the multimodal qwen3_5 and qwen3_5_moe configs
    Family("qwen3_5_text", "Qwen3.5: gated DeltaNet and gated attention 3:1, dense MLP",
           (*BODY, llama.qk_norm, qwen3_next),
           _llama(4, 32768, head_dim=256, linear_conv_kernel_dim=4, linear_key_head_dim=128,
                  linear_value_head_dim=128, linear_num_key_heads=16, linear_num_value_heads=32,
                  layer_types=None, full_attention_interval=4, partial_rotary_factor=0.25,
                  vocab_size=248320, hidden_size=4096, intermediate_size=12288,
                  num_hidden_layers=32, num_attention_heads=16),
           fixed=dict(gdn_fused_proj=False)),
    Family("qwen3_5_moe_text", "Qwen3.5-MoE: Qwen3.5's mixers, every layer MoE + shared",
           (qwen3_5_moe, SILU, llama.table, llama.qk_norm, qwen3_next),
           _llama(2, 32768, head_dim=256, linear_conv_kernel_dim=4, linear_key_head_dim=128,
                  linear_value_head_dim=128, linear_num_key_heads=16, linear_num_value_heads=32,
                  layer_types=None, full_attention_interval=4, partial_rotary_factor=0.25,
                  vocab_size=248320, hidden_size=2048, num_hidden_layers=40,
                  num_attention_heads=16, moe_intermediate_size=512,
                  shared_expert_intermediate_size=512, num_experts_per_tok=8, num_experts=256),
           fixed=dict(gdn_fused_proj=False)),
    # NemotronHBlock: one norm and one mixer per layer (Mamba-2, attention without RoPE, an MLP
    # of squared ReLU); its config renames mamba_* keys in __post_init__ (the aliases)
    Family("nemotron_h", "Nemotron-H: Mamba-2, attention and MLP blocks by a layer pattern",
           (nemotron_h,),
           dict(vocab_size=131072, hidden_size=4096, num_attention_heads=32,
                num_key_value_heads=8, head_dim=128, max_position_embeddings=4096,
                intermediate_size=21504, mlp_hidden_act="relu2", mlp_bias=False,
                tie_word_embeddings=False, mamba_num_heads=128, mamba_head_dim=64, n_groups=8,
                ssm_state_size=128, conv_kernel=4, chunk_size=128, use_conv_bias=True,
                layers_block_type=["linear_attention", "moe", "full_attention", "mlp"],
                num_hidden_layers=None, mamba_proj_bias=False, use_bias=False),
           aliases={"n_groups": ("mamba_n_groups",), "conv_kernel": ("mamba_d_conv",),
                    "use_conv_bias": ("mamba_conv_bias",), "chunk_size": ("mamba_chunk_size",),
                    "layers_block_type": ("layer_types",)},
           refuse={"mamba_proj_bias": Refusal((False,), "{value!r}: biases on the Mamba-2 "
                                              "projections are not modelled", False),
                   "use_bias": Refusal((False,), "{value!r}: biases on the Mamba-2 "
                                       "projections are not modelled", False),
                   "expand": Refusal((2,), "{value!r}: transformers' NemotronH mixer ignores "
                                     "expand (its inner width is H_s·D_s)", 2)},
           ignored=frozenset({"attention_bias", "residual_in_fp32", "time_step_limit",
                              "time_step_min", "time_step_max", "time_step_floor",
                              "mamba_ssm_cache_dtype", "mamba_hidden_act",
                              "rescale_prenorm_residual", "num_logits_to_keep"})),
    # JambaModel: Mamba-1 (selective scan, RMSNorms on Δ, B, C) and attention without RoPE 7:1,
    # a Mixtral MoE (top-k of the softmax, not renormalised) on every other layer
    Family("jamba", "Jamba: Mamba-1 and attention 7:1, MoE every other layer",
           (*BODY, jamba),
           _llama(8, 262144, vocab_size=65536, num_experts_per_tok=2, num_experts=16,
                  expert_layer_period=2, expert_layer_offset=1, attn_layer_period=8,
                  attn_layer_offset=4, mamba_d_state=16, mamba_d_conv=4, mamba_expand=2,
                  mamba_dt_rank="auto", mamba_conv_bias=True, mamba_proj_bias=False),
           aliases={"num_experts": ("num_local_experts",)},
           # the conv's activation is hidden_act (the scan's gate is SiLU whatever it is)
           refuse={"hidden_act": Refusal(("silu", "swish"), "{value!r}: Jamba's Mamba conv "
                                         "takes hidden_act; only SiLU is modelled", "silu")},
           # JambaAttention passes no window; the Hub's config.json carries these
           ignored=frozenset({"sliding_window", "num_logits_to_keep", "use_mamba_kernels"}),
           widths=dict(vocab_size=65536, hidden_size=4096, intermediate_size=14336,
                       num_hidden_layers=32, num_attention_heads=32)),
    # FalconH1DecoderLayer: attention (RoPE, k × key_multiplier) and a Mamba-2 side by side in
    # every layer, their outputs added; μP multipliers on every branch
    Family("falcon_h1", "Falcon-H1: attention ∥ Mamba-2 in every layer, μP multipliers",
           (*BODY, llama.attention_bias, llama.mlp_bias, falcon_h1),
           _llama(8, 8192, vocab_size=128000, mamba_d_ssm=1024, mamba_n_heads=128,
                  mamba_d_head="auto", mamba_n_groups=1, mamba_d_state=256, mamba_d_conv=4,
                  mamba_expand=2, mamba_chunk_size=256, mamba_conv_bias=True,
                  mamba_proj_bias=False, mamba_norm_before_gate=True, mamba_rms_norm=False,
                  projectors_bias=False, lm_head_multiplier=1.0, embedding_multiplier=1.0,
                  mlp_multipliers=None, key_multiplier=1.0, attention_out_multiplier=1.0,
                  attention_in_multiplier=1.0, ssm_multipliers=None, ssm_in_multiplier=1.0,
                  ssm_out_multiplier=1.0, attention_bias=False, mlp_bias=False),
           refuse={"hidden_act": Refusal(("silu", "swish"), "{value!r}: Falcon-H1's Mamba conv "
                                         "takes hidden_act; only SiLU is modelled", "silu"),
                   "mamba_proj_bias": Refusal((False,), "{value!r}: a bias on in_proj is not "
                                              "modelled", False),
                   "projectors_bias": Refusal((False,), "{value!r}: a bias on the Mamba "
                                              "out_proj is not modelled", False)},
           # time_step_limit clamps Δ (elementwise); the Hub's config.json carries the others
           ignored=frozenset({"time_step_limit", "num_logits_to_keep", "attn_layer_indices",
                              "mamba_use_mlp"}),
           widths=dict(vocab_size=128000, hidden_size=4096, intermediate_size=14336,
                       num_hidden_layers=32, num_attention_heads=32)),
    # GraniteMoeHybridDecoderLayer: Mamba-2 (BambaMixer) or Granite's attention by layer_types,
    # every layer a GraniteMoe MoE (top-k of the logits, softmaxed) plus a shared MLP
    Family("granitemoehybrid", "Granite 4.0-H: Mamba-2 and attention, MoE + shared MLP",
           (classic.granite, moe.experts("num_local_experts"), moe.granite_shared,
            granite_hybrid),
           dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008,
                num_hidden_layers=32, num_attention_heads=32, attention_bias=False,
                hidden_act="silu", max_position_embeddings=2048, tie_word_embeddings=False,
                mlp_bias=False, num_key_value_heads=None, num_local_experts=8,
                num_experts_per_tok=2, shared_intermediate_size=1024,
                position_embedding_type=None, layer_types=None, mamba_n_heads=128,
                mamba_n_groups=1, mamba_d_state=256, mamba_d_head="auto", mamba_d_conv=4,
                mamba_expand=2, mamba_chunk_size=256, mamba_conv_bias=True,
                mamba_proj_bias=False),
           aliases={"num_local_experts": ("num_experts",),
                    "layer_types": ("layers_block_type",)},
           fixed=dict(norm_topk_prob=True),
           refuse={"mamba_proj_bias": Refusal((False,), "{value!r}: biases on the Mamba-2 "
                                              "projections are not modelled", False),
                   "hidden_act": Refusal(("silu", "swish"), "{value!r}: the Mamba conv takes "
                                         "hidden_act; only SiLU is modelled", "silu")},
           # time_step_limit clamps Δ (elementwise); the Hub's config.json carries these
           ignored=frozenset({"time_step_limit", "normalization_function", "rope_theta",
                              "rope_scaling"}),
           widths=dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008,
                       num_hidden_layers=32, num_attention_heads=32)),
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
    *NEW,
    *CONV,
    *ZAYA,
    *INKLING,
    *HY_V4,
    *DOTS3,
)}
SUPPORTED = tuple(sorted(FAMILIES))
# every key each family's reader may read (tests/test_hf_keys.py: no more, no fewer)
READS: dict[str, frozenset[str]] = {mt: f.reads for mt, f in FAMILIES.items()}
