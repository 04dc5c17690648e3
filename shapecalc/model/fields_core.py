"""The first of ModelFields' fields: the sizes every model has, and the variants of attention,
the FFN, positions, norms and MoE; a base of fields_mixers.MixerFields (the stateful mixers'),
itself the base of ModelFields (the rest), so that the fields keep one order and each file stays
a readable table."""

from __future__ import annotations

from typing import Literal

from .quantization import Quantization
from .record import NonNeg, Pos, PosFloat, Record, _doc, _req
from .widths import LayerWidths

AttentionKind = Literal["full", "sliding", "chunked", "hca", "csa"]
FfnKind = Literal["dense", "moe", "none"]


class CoreFields(Record):
    """ModelFields' first fields (model_fields.py has them all, with what they imply)."""


    name: str = _doc("custom", "the model's name (a preset's, or custom)")
    vocab_size: Pos = _req("N_vocab: vocabulary size")
    d_model: Pos = _req("D: model width")
    n_layers: Pos = _req("N: number of Transformer blocks")
    n_heads: Pos = _req("H: query heads")
    n_kv_heads: Pos | None = _doc(None, "H_kv: key/value heads (default H; 1 = MQA; between = GQA)")
    head_dim: Pos | None = _doc(None, "Dh: head width (default D/H)")
    d_ff: Pos = _req("Dff: FFN hidden width")
    ffn: Literal["gelu", "relu", "relu2", "xielu", "swiglu", "geglu"] = _doc(
        "gelu", "gelu/relu/relu2 (squared ReLU)/xielu (Apertus' xIELU, 2 parameters α_p, α_n "
        "a layer): up, down; swiglu/geglu: gate, up, down"
    )
    norm: Literal["layernorm", "rmsnorm"] = _doc("layernorm", "the norms' kind")
    norm_weights: bool = _doc(True, "false: every norm of the model's is x/RMS(x) with no γ "
                              "(nanochat's parameter-free RMSNorm; needs rmsnorm)")
    norm_position: Literal["pre", "post", "sandwich", "output"] = _doc(
        "pre", "pre: x + f(Norm(x)); post: Norm(x + f(x)); sandwich (Gemma 2/3): "
        "x + Norm(f(Norm(x))); output (OLMo 2): x + Norm(f(x))")
    positions: Literal["learned", "sinusoidal", "rope", "alibi", "none"] = _doc(
        "learned", "alibi: no table, no rotation; a per-head linear bias on the scores (BLOOM, MPT)"
    )
    max_positions: Pos | None = _doc(
        None, "rows of a learned position table; the longest context otherwise"
    )
    tie_embeddings: bool = _doc(False, "LM head shares the embedding table")
    qkv_bias: bool = _doc(False, "biases on the q, k, v projections")
    attn_out_bias: bool = _doc(False, "bias on the attention output WO")
    ffn_bias: bool = _doc(False, "biases on the FFN matrices")
    norm_bias: bool | None = _doc(
        None, "β in the norms (default: yes for layernorm, no for rmsnorm)"
    )
    lm_head_bias: bool = _doc(False, "a bias on the LM head")
    fused_qkv: bool = _doc(
        False, "one [D,(H+2·H_kv)·Dh] matrix; changes the listing, not the numbers"
    )
    parallel_block: bool = _doc(
        False, "attention and FFN read the same norm and add in parallel (Falcon)"
    )
    sliding_window: Pos | None = _doc(
        None, "W: the KV cache keeps, and decode reads, at most W tokens"
    )
    embedding_scale: bool = _doc(False, "multiply embeddings by √D (Gemma)")
    layer_types: tuple[AttentionKind, ...] | None = _doc(
        None,
        "each layer's attention, in order: full, or sliding (window W); default: every layer "
        "sliding when sliding_window is set, else full (Hugging Face's layer_types)",
    )
    qk_norm: bool = _doc(False, "RMSNorm over each head's Dh on q and k (Qwen3): γ of Dh each")
    attention_sinks: bool = _doc(
        False, "a learned logit per head joins each softmax as one more column (gpt-oss)"
    )
    # MiMo-V2-Flash: its sliding layers' own KV heads and sinks, a value scale
    sinks_sliding_only: bool = _doc(False, "attention_sinks on the sliding layers only, none on "
                                    "the full ones (MiMo-V2-Flash)")
    kv_heads_sliding: Pos | None = _doc(None, "H_kv,s: the sliding layers' KV heads, if other "
                                        "than H_kv (MiMo-V2-Flash: 2·H_kv)")
    value_multiplier: PosFloat | None = _doc(None, "v × this after its projection "
                                             "(MiMo-V2-Flash's attention_value_scale)")
    # ALiBi models (BLOOM, MPT): the embedding norm
    embedding_norm: bool = _doc(
        False, "a norm (γ, β as the model's norms) right after the embedding lookup (BLOOM)"
    )
    # Gemma 2/3 and OLMo 2 (and norm_position sandwich, output)
    query_pre_attn_scalar: PosFloat | None = _doc(None, "s: scores × 1/√s, not 1/√Dh (Gemma 2/3)")
    attn_softcap: PosFloat | None = _doc(None, "c: scores ← c·tanh(scores/c), before the mask")
    final_softcap: PosFloat | None = _doc(None, "c: logits ← c·tanh(logits/c) (Gemma 2)")
    norm_plus_one: bool = _doc(False, "RMSNorms × (1+γ), γ stored around 0 (Gemma); same counts")
    qk_norm_width: Literal["head", "all"] = _doc("head", "q/k norms over each head's Dh, or all "
                                                "of H·Dh and H_kv·Dh before the heads split")
    rope_base: PosFloat = _doc(10000.0, "θ: RoPE's base (the executor's angles; no count changes)")
    rope_base_local: PosFloat | None = _doc(None, "θ of the sliding layers (Gemma 3), if other")
    # Mixture-of-Experts (the FFN of the layers `ffn_types` marks moe)
    n_experts: Pos | None = _doc(None, "E: routed experts (null: a dense model)")
    experts_per_token: Pos | None = _doc(None, "k: experts each token is routed to")
    d_ff_expert: Pos | None = _doc(None, "Dff_e: a routed expert's FFN width (default Dff)")
    n_shared_experts: NonNeg = _doc(0, "shared experts every token goes through")
    d_ff_shared: Pos | None = _doc(None, "Dff_s: a shared expert's width (default Dff_e)")
    shared_expert_gate: bool = _doc(
        False, "a sigmoid gate [D→1] scales the shared experts' output (Qwen2-MoE)"
    )
    router_bias: bool = _doc(False, "a bias on the router [D→E] (gpt-oss)")
    routing_bias: bool = _doc(
        False, "a learned bias of E added to the scores for the choice only (AFMoE's expert_bias, "
        "a parameter; DeepSeek's correction bias is a buffer)")
    expert_bias: bool = _doc(False, "biases on the experts' matrices (gpt-oss)")
    router_scoring: Literal["softmax", "sigmoid", "topk_sigmoid", "sqrtsoftplus"] = _doc(
        "softmax", "how router logits become scores (topk_sigmoid: the top k logits, then a "
        "sigmoid of those k, as Llama 4; sqrtsoftplus: √softplus, DeepSeek-V4)"
    )
    norm_topk_prob: bool = _doc(False, "the k chosen scores are renormalised to sum to 1")
    routed_scaling_factor: PosFloat | None = _doc(
        None, "the routed experts' output is scaled by this (DeepSeek)"
    )
    ffn_types: tuple[FfnKind, ...] | None = _doc(
        None,
        "each layer's FFN (channel mixer), in order: dense, moe or none; default: every layer "
        "moe when n_experts is set, else dense",
    )
    # Llama 4: chunked attention, NoPE layers, the L2 q/k norm and the attention temperature
    attention_chunk_size: Pos | None = _doc(
        None, "C: a chunked layer's query reads only the keys of its own chunk of C positions "
        "(layer_types marks the chunked layers; default: every layer)",
    )
    nope_layers: tuple[NonNeg, ...] | None = _doc(
        None, "layers (0-based) that apply no RoPE (Llama 4's NoPE layers: no_rope_layers 0)"
    )
    qk_l2_norm: bool = _doc(
        False, "q and k divided by their RMS over each head's Dh, no weights, after RoPE, on the "
        "layers with RoPE (Llama 4's use_qk_norm)",
    )
    attn_temperature_tuning: bool = _doc(
        False, "on NoPE layers q is scaled per position by 1 + 0.1·ln(1 + ⌊(pos+1)/8192⌋) "
        "(Llama 4)",
    )
    q_temperature_beta: float | None = _doc(
        None, "β: on every layer q is scaled per position by 1 + β·ln(1 + ⌊pos/S⌋) after RoPE "
        "(Ministral 3's llama_4_scaling_beta; S is q_temperature_floor)",
    )
    q_temperature_floor: Pos | None = _doc(
        None, "S of q_temperature_beta: positions per step of the temperature (Ministral 3's "
        "original_max_position_embeddings)",
    )
    routing_on_input: bool = _doc(
        False, "each routing weight scales the token's input to its expert, not the expert's "
        "output (Llama 4)",
    )
    # Multi-head Latent Attention (DeepSeek-V2/V3, Kimi K2): K and V come from a cached latent
    kv_lora_rank: Pos | None = _doc(
        None, "D_c: the KV latent width (kv_lora_rank); set: attention is MLA"
    )
    q_lora_rank: Pos | None = _doc(
        None, "D_q: the query latent width (q_lora_rank); null: a plain q projection"
    )
    qk_nope_head_dim: Pos | None = _doc(None, "D_n: each head's q/k width without RoPE")
    qk_rope_head_dim: Pos | None = _doc(
        None, "D_r: the decoupled RoPE width, one k_rope shared by all heads"
    )
    v_head_dim: Pos | None = _doc(None, "D_v: each head's value width (MLA's; or attention's "
                                  "value heads of their own width, MiMo-V2-Flash)")
    # DeepSeek Sparse Attention (DSA): a lightning indexer picks each query's K_sel keys
    index_topk: Pos | None = _doc(
        None, "K_sel: keys each query attends to, picked by the lightning indexer (index_topk); "
        "set: MLA with DeepSeek Sparse Attention")
    index_heads: Pos | None = _doc(None, "H_I: the indexer's query heads (index_n_heads)")
    index_head_dim: Pos | None = _doc(None, "D_I: the indexer's head width, its first D_r turned "
                                      "by RoPE (index_head_dim)")
    index_shared_layers: tuple[NonNeg, ...] | None = _doc(
        None, "layers that run no indexer of their own and reuse the previous indexer layer's "
        "selection (GLM-5's IndexShare: indexer_types 'shared'); they cache no indexer key")
    # block-sparse attention (MiniMax-M3's MSA): an indexer picks each query's K_blk key blocks
    index_topk_blocks: Pos | None = _doc(
        None, "K_blk: key blocks of S_blk keys each query attends to, picked per KV group by a "
        "block indexer (index_topk_blocks); set: GQA with block-sparse attention")
    index_block_size: Pos | None = _doc(None, "S_blk: keys per block the block indexer scores "
                                        "(max over the block) and selects (index_block_size)")
    index_local_blocks: Pos | None = _doc(None, "L_blk: the query's own block and the L_blk − 1 "
                                          "before it, always selected (index_local_blocks)")
    block_index_heads: Pos | None = _doc(None, "H_I: the block indexer's query heads, one "
                                         "selection per KV group (index_n_heads)")
    block_index_head_dim: Pos | None = _doc(None, "D_I: the block indexer's head width; its one "
                                            "key head is cached (index_head_dim)")
    block_sparse_layers: tuple[NonNeg, ...] | None = _doc(
        None, "the layers that run the block indexer (layer_types 'minimax_m3_sparse'); "
        "default every layer; the others attend densely")
    # dots3 (dots3_note): its MLA's extras, its indexer's cache, and widths set per layer
    index_cache_dtype: Literal["fp32"] | None = _doc(
        None, "the indexer keys' cache dtype, if not the KV dtype (dots3: transformers turns them "
        "by an fp32 RoPE and caches them in fp32)")
    mla_rope_norm: bool = _doc(False, "an RMSNorm (γ of D_r) on the shared k_rope before RoPE "
                               "(dots3's k_rope_only_layernorm)")
    mla_latent_scale: bool = _doc(False, "the normed q and kv latents × √(D/D_q) and √(D/D_c) "
                                  "(dots3's q_lora_scale, kv_lora_scale)")
    layer_widths: LayerWidths | None = _doc(
        None, "widths set per layer (dots3's per_layer_config): lists of N values, layer i's "
        "the i-th (n_heads, the MLA widths, d_ff); a field left out is the model's")

    # Classic variants (GPT-NeoX, GPT-J, Phi, StableLM, Cohere, Granite, Falcon's new decoder)
    rotary_dim: Pos | None = _doc(
        None, "R: RoPE turns only the first R of each head's Dh (partial rotary: GPT-NeoX "
        "rotary_pct, Phi/StableLM partial_rotary_factor, GPT-J rotary_dim); default Dh"
    )
    rope_interleaved: bool = _doc(
        False, "RoPE turns pairs (2i, 2i+1) instead of the two halves (GPT-J, Cohere); same counts"
    )
    parallel_norms: Literal[1, 2] = _doc(
        1, "a parallel block's norms: 1, shared by attention and FFN (GPT-J, Phi-2, Cohere); 2, "
        "each reads its own norm of x (GPT-NeoX ln1/ln2, Falcon's ln_attn/ln_mlp)"
    )
    qk_norm_per_head: bool = _doc(
        False, "LayerNorm without β over each head's Dh on q and k, a γ per head (H·Dh and "
        "H_kv·Dh: StableLM qk_layernorm, Cohere use_qk_norm)"
    )
    embedding_multiplier: PosFloat | None = _doc(None, "embeddings × this (Granite)")
    attention_multiplier: PosFloat | None = _doc(
        None, "the scores × this instead of 1/√Dh (Granite)"
    )
    residual_multiplier: PosFloat | None = _doc(
        None, "each branch's output × this before its residual add (Granite)"
    )
    logit_scale: PosFloat | None = _doc(
        None, "the logits × this (Cohere logit_scale; Granite's 1/logits_scaling)"
    )
    mtp_layers: NonNeg = _doc(0, "multi-token-prediction modules after the model (DeepSeek-V3's "
                              "num_nextn_predict_layers): totals.mtp_params, not in params")
    mtp_block: Literal["last", "sliding_dense"] = _doc(
        "last", "each MTP module's block: of the last layer's kind (DeepSeek-V3), or a sliding "
        "layer (window W) with a dense FFN of Dff (MiMo-V2-Flash)")
    mtp_shared_head: bool = _doc(False, "the MTP modules read the model's embedding lookup and "
                                 "its LM head, no copies of their own (MiMo-V2-Flash)")
    quantization: Quantization | None = _doc(None, "how the checkpoint stores its weights "
                                            "(quantization_config): their dtype and bytes")
