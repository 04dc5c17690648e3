"""The table's entries of the families released in 2025 and added to transformers in 2026 (issue
21): each one entry over the mechanisms of inputs/hf_*.py, measured against transformers by
tests/torch_reference/measure_families.py. hf_families.py joins them to the table."""

from __future__ import annotations

from . import hf_classic as classic
from . import hf_cohere2_moe as cohere2_moe
from . import hf_deepseek as deepseek
from . import hf_deepseek_v4 as deepseek_v4
from . import hf_gemma as gemma
from . import hf_gemma4 as gemma4
from . import hf_kda as kda
from . import hf_laguna as laguna
from . import hf_llama as llama
from . import hf_minimax as minimax
from . import hf_moe as moe
from .hf_base import Family, Refusal
from .hf_deltanet import olmo_hybrid
from .hf_llama import BODY, SILU
from .hf_llama import class_defaults as _llama
from .hf_mimo import MIMO_ROPE, mimo_attention, mimo_mtp, mimo_router

NEW: tuple[Family, ...] = (
    # KimiLinearDecoderLayer: KDA (linear_attention) or MLA without RoPE (full_attention), the
    # layers from linear_attn_config (1-based); a dense MLP on the first first_k_dense_replace
    # layers, then DeepSeek-V3's MoE; its config's attribute map renames the MoE keys
    Family("kimi_linear", "Kimi-Linear: KDA and MLA without RoPE 3:1, DeepSeek-V3 MoE",
           (*BODY, kda.kimi_moe, kda.kimi_linear),
           _llama(32, 1048576, kv_lora_rank=512, q_lora_rank=None, qk_rope_head_dim=64,
                  qk_nope_head_dim=128, v_head_dim=128, attention_bias=False, head_dim=None,
                  num_local_experts=256, num_experts_per_tok=8, n_shared_experts=1,
                  moe_intermediate_size=1024, routed_scaling_factor=2.446, n_group=1,
                  topk_group=1, norm_topk_prob=True, first_k_dense_replace=1,
                  mlp_layer_types=None, layer_types=None, linear_attn_config=None,
                  linear_head_dim=128, linear_num_heads=32, linear_conv_kernel_dim=4),
           aliases={"num_local_experts": ("num_experts",),
                    "num_experts_per_tok": ("num_experts_per_token",),
                    "n_shared_experts": ("num_shared_experts",),
                    "norm_topk_prob": ("moe_renormalize",), "n_group": ("num_expert_group",)},
           refuse={"moe_layer_freq": Refusal((1,), "{value}: MoE on every k-th layer only is "
                                             "read by Kimi's remote code, not by transformers",
                                             1),
                   "mla_use_nope": Refusal((True,), "{value!r}: transformers' Kimi-Linear MLA "
                                           "never applies RoPE", True),
                   "moe_router_activation_func": Refusal(("sigmoid",), "{value!r}: "
                                                         "transformers' Kimi-Linear router "
                                                         "always scores with sigmoid",
                                                         "sigmoid")},
           # KimiLinearConfig drops num_mtp_layers: transformers builds no MTP module
           ignored=frozenset({"num_nextn_predict_layers", "model_max_length"}),
           widths=dict(vocab_size=163840, hidden_size=2304, intermediate_size=9216,
                       num_hidden_layers=27, num_attention_heads=32)),
    # BailingHybridDecoderLayer (Kimi-Linear's): KDA with full-rank gates (bounded with
    # kda_safe_gate) or MLA with RoPE and a head-wise output gate, the last of each
    # layer_group_size layers; DeepSeek-V3's MoE (512 experts, 8 groups); its MTP layers are
    # skipped when loading (transformers builds none)
    Family("bailing_hybrid", "Ling 3.0: KDA and gated MLA 5:1, grouped routing of 512 experts",
           (*BODY, kda.kimi_moe, kda.bailing_hybrid),
           _llama(32, 262144, kv_lora_rank=512, q_lora_rank=None, qk_rope_head_dim=64,
                  qk_nope_head_dim=128, v_head_dim=128, attention_bias=False, head_dim=128,
                  num_local_experts=512, num_experts_per_tok=8, n_shared_experts=1,
                  moe_intermediate_size=768, routed_scaling_factor=2.5, n_group=8,
                  topk_group=4, norm_topk_prob=True, first_k_dense_replace=2,
                  mlp_layer_types=None, layer_types=None, layer_group_size=6,
                  short_conv_kernel_size=4, kda_safe_gate=True, kda_lower_bound=-5.0,
                  rope_parameters=None, rope_theta=6000000.0),
           aliases={"num_local_experts": ("num_experts",),
                    "num_experts_per_tok": ("num_experts_per_token",),
                    "n_shared_experts": ("num_shared_experts",),
                    "norm_topk_prob": ("moe_renormalize",), "n_group": ("num_expert_group",)},
           ignored=frozenset({"num_mtp_layers", "num_nextn_predict_layers",
                              "model_max_length"}),
           widths=dict(vocab_size=157184, hidden_size=2560, intermediate_size=6144,
                       num_hidden_layers=42, num_attention_heads=32)),
    # OlmoHybridModel: gated DeltaNet layers in Llama's pre-norm block, attention layers in
    # OLMo 3's (whole-width q/k RMSNorms, the attention's and the MLP's output normed before
    # each residual, no pre-norms)
    Family("olmo_hybrid", "OLMo-Hybrid: gated DeltaNet (β ∈ (0, 2)) and OLMo 3 attention 3:1",
           (*BODY, llama.attention_bias, olmo_hybrid),
           _llama(None, 65536, attention_bias=False, layer_types=None, linear_num_key_heads=None,
                  linear_num_value_heads=None, linear_key_head_dim=None,
                  linear_value_head_dim=None, linear_conv_kernel_dim=4,
                  linear_allow_neg_eigval=True, rope_parameters=None, rope_theta=None),
           fixed=dict(norm_position="output", qk_norm=True, qk_norm_width="all",
                      gdn_fused_proj=False),
           widths=dict(vocab_size=100352, hidden_size=3840, intermediate_size=11008,
                       num_hidden_layers=32, num_attention_heads=30)),
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
    Family("cwm", "CWM: Llama with 3 sliding layers of 8192 to 1 global (the first)",
           (*BODY, llama.mlp_bias, llama.every_kth_full(4, first=True)),
           _llama(8, 131072, head_dim=128, mlp_bias=False, sliding_window=8192),
           widths=dict(vocab_size=128256, hidden_size=6144, intermediate_size=21504,
                       num_hidden_layers=64, num_attention_heads=48)),
    Family("olmo3", "OLMo 3: OLMo 2 with 3 sliding layers to 1 full",
           (*BODY, llama.attention_bias, gemma.rope_theta, llama.every_kth_full(4, first=False)),
           _llama(None, 2048, rope_theta=500000.0, sliding_window=4096),
           fixed=dict(norm_position="output", qk_norm=True, qk_norm_width="all"),
           widths=dict(vocab_size=50304, hidden_size=4096, intermediate_size=11008,
                       num_hidden_layers=32, num_attention_heads=32)),
    Family("dots1", "dots.llm1: Qwen3 attention, DeepSeek-V3 MoE",
           (*BODY, llama.qk_norm, llama.late_windows, deepseek.deepseek_moe),
           _llama(32, 2048, attention_bias=False, sliding_window=4096, max_window_layers=62,
                  moe_intermediate_size=1408, n_shared_experts=None, n_routed_experts=None,
                  num_experts_per_tok=None, first_k_dense_replace=0, norm_topk_prob=False,
                  routed_scaling_factor=1.0, scoring_func="sigmoid"),
           aliases={"n_routed_experts": ("num_local_experts",)},
           refuse={"scoring_func": Refusal(("sigmoid",), "{value!r}: transformers' dots1 "
                                           "router always scores with sigmoid")},
           widths=dict(vocab_size=152064, hidden_size=4608, intermediate_size=10944,
                       num_hidden_layers=62, num_attention_heads=32)),
    # DeepseekV3Attention (MLA) and Glm4MoeMoE (sigmoid noaux_tc, n_shared × the expert width);
    # which layers are MoE comes from mlp_layer_types alone. head_dim is qk_rope_head_dim's alias
    Family("glm4_moe_lite", "GLM-4.7-Flash: MLA, DeepSeek-V3 MoE, per-layer MLP kinds",
           (*BODY, deepseek.mla, deepseek.deepseek_moe, deepseek.mlp_layer_types),
           _llama(20, 202752, kv_lora_rank=512, q_lora_rank=768, qk_nope_head_dim=192,
                  qk_rope_head_dim=64, v_head_dim=256, moe_intermediate_size=1536,
                  n_shared_experts=1, n_routed_experts=64, routed_scaling_factor=1.8,
                  num_experts_per_tok=4, norm_topk_prob=True, attention_bias=False,
                  scoring_func="sigmoid"),
           aliases={"n_routed_experts": ("num_local_experts",)},
           refuse={"scoring_func": Refusal(("sigmoid",), "{value!r}: transformers' "
                                           "glm4_moe_lite router always scores with sigmoid")},
           widths=dict(vocab_size=154880, hidden_size=2048, intermediate_size=10240,
                       num_hidden_layers=47, num_attention_heads=20)),
    # DeepseekV32Config (Glm4MoeLiteConfig's keys): DeepSeek-V3 with DeepSeek Sparse Attention,
    # a lightning indexer on every layer; q_a_proj always built; mlp_layer_types defaults to
    # first_k_dense_replace dense layers, then MoE
    Family("deepseek_v32", "DeepSeek-V3.2: MLA with DSA's lightning indexer (top-2048 keys)",
           (*BODY, deepseek.mla_dsa, deepseek.deepseek_moe,
            deepseek.mlp_layer_types_dense_first, deepseek.indexer),
           _llama(128, 163840, kv_lora_rank=512, q_lora_rank=1536, qk_nope_head_dim=128,
                  qk_rope_head_dim=64, v_head_dim=128, moe_intermediate_size=2048,
                  n_shared_experts=1, n_routed_experts=256, routed_scaling_factor=2.5,
                  num_experts_per_tok=8, first_k_dense_replace=3, norm_topk_prob=True,
                  attention_bias=False, index_topk=2048, index_n_heads=64, index_head_dim=128,
                  scoring_func="sigmoid"),
           aliases={"n_routed_experts": ("num_local_experts", "num_experts")},
           refuse={"scoring_func": Refusal(("sigmoid",), "{value!r}: transformers' deepseek_v32 "
                                           "router always scores with sigmoid")},
           widths=dict(vocab_size=129280, hidden_size=7168, intermediate_size=18432,
                       num_hidden_layers=61, num_attention_heads=128)),
    # GlmMoeDsaConfig (DeepseekV32Config's keys): DeepSeek-V3.2's attention and MoE with
    # IndexShare, layers that reuse the previous indexer layer's top-k (indexer_types; default
    # every layer its own); the indexer's RoPE interleaved (the same count)
    Family("glm_moe_dsa", "GLM-5: MLA with DSA's indexer (IndexShare), DeepSeek-V3 MoE",
           (*BODY, deepseek.mla_dsa, deepseek.deepseek_moe,
            deepseek.mlp_layer_types_dense_first, deepseek.indexer, deepseek.indexer_types),
           _llama(64, 202752, kv_lora_rank=512, q_lora_rank=2048, qk_nope_head_dim=192,
                  qk_rope_head_dim=64, v_head_dim=256, moe_intermediate_size=2048,
                  n_shared_experts=1, n_routed_experts=256, routed_scaling_factor=2.5,
                  num_experts_per_tok=8, first_k_dense_replace=3, norm_topk_prob=True,
                  attention_bias=False, index_topk=2048, index_n_heads=32, index_head_dim=128,
                  scoring_func="sigmoid", indexer_types=None,
                  index_topk_pattern=None, index_topk_freq=1, index_skip_topk_offset=2),
           aliases={"n_routed_experts": ("num_local_experts", "num_experts")},
           refuse={"scoring_func": Refusal(("sigmoid",), "{value!r}: transformers' glm_moe_dsa "
                                           "router always scores with sigmoid")},
           widths=dict(vocab_size=154880, hidden_size=6144, intermediate_size=12288,
                       num_hidden_layers=78, num_attention_heads=64)),
    # DeepseekV3Attention (MLA) with Llama 4's query temperature (a scale, no count); DeepSeek-V2's
    # router (softmax, group-limited, top-k renormalised, × routed_scaling_factor), no correction
    # bias; DeepseekV3MoE's n_shared × the expert width; the first first_k_dense_replace dense
    Family("mistral4", "Mistral Small 4: MLA, softmax group-limited MoE, shared expert",
           (*BODY, deepseek.mla_qk_head, deepseek.deepseek_moe),
           _llama(32, 1048576, kv_lora_rank=256, q_lora_rank=1024, qk_nope_head_dim=64,
                  qk_rope_head_dim=64, v_head_dim=128, moe_intermediate_size=2048,
                  n_shared_experts=1, n_routed_experts=128, routed_scaling_factor=1.0,
                  num_experts_per_tok=4, first_k_dense_replace=0, norm_topk_prob=True,
                  attention_bias=False, scoring_func="softmax"),
           aliases={"n_routed_experts": ("num_local_experts",)},
           refuse={"scoring_func": Refusal(("softmax",), "{value!r}: transformers' mistral4 "
                                           "router always scores with softmax")},
           widths=dict(vocab_size=131072, hidden_size=4096, intermediate_size=12288,
                       num_hidden_layers=36, num_attention_heads=32)),
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
    # LlamaAttention with q/k/v biases under attention_bias and o_proj unbiased; Glm4MoeMoE (sigmoid
    # noaux_tc, n_shared × the expert width) on every layer: the class drops intermediate_size,
    # first_k_dense_replace, use_qk_norm and num_mtp_layers from Glm4MoeConfig. Llama's RoPE
    # turns the whole head: a partial_rotary_factor below 1 fails there (left to the audit)
    Family("solar_open", "Solar Open: GQA, q/k/v biases, DeepSeek-V3 MoE on every layer",
           (moe.moe_body, SILU, llama.table, llama.qkv_bias_only, deepseek.deepseek_moe),
           _llama(8, 131072, head_dim=128, attention_bias=False, n_routed_experts=128,
                  num_experts_per_tok=8, n_shared_experts=1, routed_scaling_factor=1.0,
                  norm_topk_prob=True, scoring_func="sigmoid"),
           aliases={"n_routed_experts": ("num_local_experts",)},
           refuse={"scoring_func": Refusal(("sigmoid",), "{value!r}: transformers' solar_open "
                                           "router always scores with sigmoid"),
                   "first_k_dense_replace": Refusal((None, 0), "{value}: transformers' "
                                                    "solar_open puts MoE on every layer whatever "
                                                    "first_k_dense_replace says")},
           ignored=frozenset({"intermediate_size"}),  # the Hub's config.json gives it; unread
           widths=dict(vocab_size=196608, hidden_size=4096, moe_intermediate_size=1280,
                       num_hidden_layers=48, num_attention_heads=64)),
    # LlamaAttention (attention_bias on q, k, v and o) with per-head q/k RMSNorm after RoPE;
    # HunYuanMoEV1Moe on every layer (attribute_map: num_experts_per_tok is moe_topk)
    Family("hunyuan_v1_moe", "Hunyuan-A13B: q/k norms, top-k MoE plus a shared MLP per layer",
           (*BODY, llama.qk_norm, moe.hunyuan_moe),
           _llama(None, 2048, attention_bias=False, num_experts=1, moe_topk=1),
           aliases={"moe_topk": ("num_experts_per_tok",), "num_experts": ("num_local_experts",)},
           widths=dict(vocab_size=290943, hidden_size=4096, intermediate_size=11008,
                       num_hidden_layers=32, num_attention_heads=32)),
    # Ernie4_5_MoeAttention (LlamaAttention; use_bias on q, k, v, o and on the dense and shared
    # MLPs, not the routed experts: refused), the MoE layers by start, end and interval
    Family("ernie4_5_moe", "ERNIE 4.5 MoE: MoE from a start layer, softmax top-k, shared experts",
           (*BODY, moe.ernie_moe),
           _llama(4, 131072, True, moe_intermediate_size=1536, moe_k=6, moe_num_experts=64,
                  moe_num_shared_experts=2, moe_layer_start_index=1, moe_layer_end_index=-1,
                  moe_layer_interval=1, use_bias=False),
           aliases={"moe_num_experts": ("num_experts",), "moe_k": ("num_experts_per_tok",)},
           refuse={"use_bias": Refusal((False,), "{value!r}: biases on attention and the dense "
                                       "and shared MLPs but not the routed experts are not "
                                       "modelled", False)},
           widths=dict(vocab_size=103424, hidden_size=2560, intermediate_size=12288,
                       num_hidden_layers=28, num_attention_heads=20)),
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
    # ApertusDecoderLayer: Llama's pre-norm block (attention_layernorm, feedforward_layernorm);
    # LlamaAttention (attention_bias on q, k, v and o) with RMSNorm q/k norms over each head's
    # Dh before RoPE; NemotronMLP ungated, up → xIELU (two learned scalars a layer) → down, its
    # projections never biased
    Family("apertus", "Apertus: Llama with per-head q/k norms and an ungated xIELU MLP",
           (llama.llama, llama.plain("hidden_act"), llama.table, llama.qk_norm),
           _llama(None, 65536, act="xielu", attention_bias=False),
           refuse={"qk_norm": Refusal((True,), "{value!r}: ApertusAttention always builds its "
                                      "q/k norms", True),
                   "mlp_bias": Refusal((False,), "{value!r}: ApertusMLP's up and down have no "
                                       "biases whatever mlp_bias says", False)},
           widths=dict(vocab_size=131072, hidden_size=4096, intermediate_size=14336,
                       num_hidden_layers=32, num_attention_heads=32)),
    # Apertus1p5TextForCausalLM: Apertus' text model (its decoder unchanged) whose LM head may be
    # pruned to output_vocab_size rows, narrower than the embedding table: not modelled, refused
    Family("apertus1p5_text", "Apertus 1.5's text model: Apertus with its own vocabulary",
           (llama.llama, llama.plain("hidden_act"), llama.table, llama.qk_norm,
            llama.unpruned_head),
           _llama(None, 65536, act="xielu", attention_bias=False),
           refuse={"qk_norm": Refusal((True,), "{value!r}: ApertusAttention always builds its "
                                      "q/k norms", True),
                   "mlp_bias": Refusal((False,), "{value!r}: ApertusMLP's up and down have no "
                                       "biases whatever mlp_bias says", False)},
           widths=dict(vocab_size=266752, hidden_size=4096, intermediate_size=14336,
                       num_hidden_layers=32, num_attention_heads=32)),
    # Ministral3Attention: Mistral's (a sliding window when sliding_window is set), q scaled per
    # position after RoPE by 1 + β·ln(1 + ⌊pos/S⌋) (Llama 4's temperature, on every layer);
    # YaRN RoPE (frequencies and a cos/sin factor: no count)
    Family("ministral3", "Ministral 3: Mistral with YaRN and Llama 4's query temperature",
           (*BODY, llama.sliding, llama.query_temperature),
           _llama(8, 262144, head_dim=128, sliding_window=None, rope_parameters=dict(
               rope_type="yarn", rope_theta=1000000.0, factor=16.0,
               original_max_position_embeddings=16384, beta_fast=32.0, beta_slow=1.0,
               mscale_all_dim=1.0, mscale=1.0, llama_4_scaling_beta=0.1)),
           widths=dict(vocab_size=131072, hidden_size=4096, intermediate_size=14336,
                       num_hidden_layers=34, num_attention_heads=32)),
    # NanoChat: every norm parameter-free (Llama4TextL2Norm: x/RMS(x)), the embeddings normed
    # before the first layer; Qwen3Attention (attention_bias on q, k, v and o) with the q/k norms
    # after RoPE; CLIPMLP ungated (fc1 → hidden_act → fc2, no biases); Gemma 2's head: the
    # logits softcapped by final_logit_softcapping
    Family("nanochat", "nanochat: relu², parameter-free norms, q/k norms after RoPE, softcap",
           (llama.llama, llama.plain("hidden_act"), llama.table, llama.attention_bias,
            gemma.final_softcap),
           _llama(None, 2048, act="relu2", attention_bias=False, final_logit_softcapping=15.0),
           fixed=dict(norm_weights=False, embedding_norm=True, qk_l2_norm=True, ffn_bias=False),
           widths=dict(vocab_size=50304, hidden_size=768, intermediate_size=8192,
                       num_hidden_layers=12, num_attention_heads=6)),
    # Cohere2MoeDecoderLayer: Cohere 2's parallel block (x + attn(n(x)) + mlp(n(x)), interleaved
    # RoPE, logit scale) with the MLP Mixtral's experts under a top-k router (softmax or
    # sigmoid of the k logits) and an optional shared MLP, or a dense MLP on the prefix layers;
    # 3 sliding : 1 full, RoPE on the sliding layers (hf_cohere2_moe.py)
    Family("cohere2_moe", "Command A+: Cohere 2's parallel block with MoE, 3 sliding : 1 full",
           (classic.cohere2, cohere2_moe.cohere2_moe),
           dict(logit_scale=0.0625, attention_bias=False, hidden_act="silu", head_dim=128,
                max_position_embeddings=8192, tie_word_embeddings=True, sliding_window=4096,
                num_key_value_heads=None, num_experts=8, num_experts_per_tok=2,
                num_shared_experts=0, shared_expert_combination_strategy="average",
                expert_selection_fn="softmax", layer_types=None, mlp_layer_types=None,
                prefix_dense_sliding_window_pattern=1, norm_topk_prob=True,
                prefix_dense_intermediate_size=None, rms_norm_eps=None,
                sliding_window_pattern=4, first_k_dense_replace=0),
           widths=dict(vocab_size=256000, hidden_size=8192, intermediate_size=22528,
                       num_hidden_layers=40, num_attention_heads=64)),
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
    laguna.ENTRY,  # LagunaForCausalLM: its entry beside its mechanisms (hf_laguna.py)
    # DeepseekV4ForCausalLM: compressed attention (a window of 128 on every layer; csa layers
    # ×4 with a lightning indexer keeping 512 entries, hca ×128), one K=V head, sinks, the
    # grouped output projection; mHC (4 streams, 20 Sinkhorn steps); 256 experts, top 6 by
    # sqrtsoftplus, the first 3 layers hash-routed, one shared expert, SwiGLU clamped at 10
    Family("deepseek_v4", "DeepSeek-V4: compressed sparse + heavily compressed attention, mHC",
           deepseek_v4.MECHANISMS,
           dict(vocab_size=129280, hidden_size=4096, moe_intermediate_size=2048,
                num_hidden_layers=43, num_attention_heads=64, num_key_value_heads=1,
                head_dim=512, q_lora_rank=1024, num_experts_per_tok=6, n_routed_experts=256,
                n_shared_experts=1, scoring_func="sqrtsoftplus", norm_topk_prob=True,
                routed_scaling_factor=1.5, max_position_embeddings=1048576, layer_types=None,
                compress_ratios=None, compress_rates=None, compress_rate_csa=None,
                compress_rate_hca=None, hc_mult=4, hc_sinkhorn_iters=20, hc_eps=1e-6,
                mlp_layer_types=None, num_hash_layers=None, swiglu_limit=10.0,
                sliding_window=128, o_groups=8, o_lora_rank=1024, index_n_heads=64,
                index_head_dim=128, index_topk=512, num_nextn_predict_layers=1,
                hidden_act="silu", tie_word_embeddings=False, partial_rotary_factor=None,
                qk_rope_head_dim=None, attention_bias=False, mlp_bias=False),
           aliases={"n_routed_experts": ("num_local_experts",),
                    "moe_intermediate_size": ("intermediate_size",)}),
    # MiMoV2FlashDecoderLayer (Llama's pre-norm block) over hf_mimo.py's attention (sliding
    # layers: 2·H_kv, sinks) and DeepSeek-V3's router without a shared expert; the checkpoint's
    # MTP layers, which transformers skips, counted apart (num_nextn_predict_layers)
    Family("mimo_v2_flash", "MiMo-V2-Flash: 5 sliding (2·H_kv, sinks) : 1 full, D_v < Dh, MoE",
           (*BODY, llama.attention_bias, mimo_attention, moe.mlp_layer_types(False),
            moe.experts("n_routed_experts", "moe_intermediate_size"), moe.norm_topk,
            mimo_router, mimo_mtp),
           _llama(4, 131072, head_dim=192, v_head_dim=128, sliding_window=129,
                  attention_bias=False, layer_types=None, mlp_layer_types=None,
                  rope_parameters=MIMO_ROPE, attention_value_scale=0.707,
                  moe_intermediate_size=2048,
                  num_experts_per_tok=8, n_routed_experts=256, routed_scaling_factor=1.0,
                  n_group=1, topk_group=1, norm_topk_prob=True),
           aliases={"n_routed_experts": ("num_local_experts",)},
           fixed=dict(router_scoring="sigmoid"),
           ignored=frozenset({"num_mtp_layers"}),
           widths=dict(vocab_size=152576, hidden_size=4096, intermediate_size=16384,
                       num_hidden_layers=48, num_attention_heads=64)),
    minimax.MINIMAX_M3,  # MiniMax-M3's text model: block-sparse attention (hf_minimax.py)
    *gemma4.FAMILIES,  # Gemma 4's two decoders (hf_gemma4.py)
)
