"""ModelConfig's fields, each with its symbol and meaning, and the sizes they imply (D/H, the
expert widths, …). config.py's ModelConfig adds the rules between fields (its own and rules.py's):
rules.py reads a ModelFields, so neither imports the other's module in a circle."""

from __future__ import annotations

from typing import Literal

from .fields_mixers import MixerFields, MixerKind  # noqa: F401  (MixerKind: re-exported)
from .quantization import Quantization
from .record import NonNeg, Pos, PosFloat, _doc, _req
from .widths import LayerWidths

AttentionKind = Literal["full", "sliding", "chunked", "hca", "csa"]
FfnKind = Literal["dense", "moe", "none"]



class ModelFields(MixerFields):
    """ModelConfig's fields and what they imply (config.py adds the rules between them); the
    stateful token mixers' are MixerFields'."""

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

    attn_output_gate: bool = _doc(False, "attention's output × sigmoid(x·W_g), W_g [D, H·Dh] "
                                  "(Qwen3-Next: q_proj's second half); with MLA [D, H·D_v], "
                                  "unbiased (Hunyuan 4's gate_proj)")
    attn_head_gate: bool = _doc(False, "each head's attention output × sigmoid(x·W_g), W_g [D, H]: "
                                "one gate a head (LFM3's g_proj; Ling 3.0's MLA g_proj)")
    # routing and activation variants (DeepSeek-V4, Laguna)
    router_softcap: PosFloat | None = _doc(None, "c: router logits ← c·tanh(logits/c) before "
                                           "the scoring (moe_router_logit_softcapping)")
    attn_gate_act: Literal["sigmoid", "softplus"] = _doc(
        "sigmoid", "the output gates' activation (attn_output_gate, attn_head_gate): sigmoid, or "
        "softplus log(1 + eˣ) (Laguna's g_proj)")
    rotary_dim_local: Pos | None = _doc(None, "R of the sliding layers where it differs from "
                                        "the full layers' (Laguna: RoPE per layer type)")
    hash_moe_layers: NonNeg = _doc(0, "the first n MoE layers choose their k experts by the "
                                   "token id (DeepSeek-V4's hash_moe: a frozen [N_vocab, k] "
                                   "tid2eid table, a buffer); the scores still weigh them")
    swiglu_limit: PosFloat | None = _doc(None, "L: clamped SwiGLU, gate ≤ L and −L ≤ up ≤ L "
                                         "before the activation (DeepSeek-V4's swiglu_limit)")
    swiglu_limit_routed_only: bool = _doc(False, "the clamp on the routed experts only, not on "
                                          "the dense and shared FFNs (Hunyuan 4's HYV4Experts)")
    # DeepSeek-V4's attention: one K=V head over a window W, compressed entries beside it
    shared_kv: bool = _doc(False, "DeepSeek-V4's attention: q through the latent D_q (q_a, its "
                           "norm, q_b; each head RMS-normed without γ), one K=V head [D → Dh] "
                           "(its norm γ), sinks, a window of W keys on every layer, the "
                           "grouped low-rank output projection; hca layers add compressed "
                           "entries")
    o_groups: Pos | None = _doc(None, "g: head groups of the grouped output projection "
                                "(shared_kv): each group's H·Dh/g → d_g, then g·d_g → D")
    o_lora_rank: Pos | None = _doc(None, "d_g: each group's width in the grouped output "
                                   "projection (o_lora_rank)")
    compress_ratio_hca: Pos | None = _doc(None, "m′: an hca layer compresses each m′ tokens "
                                          "into one K=V entry (heavily compressed attention)")
    compress_ratio_csa: Pos | None = _doc(None, "m: a csa layer compresses each m tokens (over "
                                          "overlapping windows of 2m) into one entry, and its "
                                          "indexer picks K_sel of them (compressed sparse "
                                          "attention)")
    csa_index_heads: Pos | None = _doc(None, "H_I: the csa indexer's query heads "
                                       "(index_n_heads)")
    csa_index_head_dim: Pos | None = _doc(None, "D_I: the csa indexer's head width, its own "
                                          "compressor's entries as wide (index_head_dim)")
    csa_index_topk: Pos | None = _doc(None, "K_sel: compressed entries each query keeps "
                                      "(index_topk)")
    hc_streams: Pos | None = _doc(None, "n_hc: residual streams of the manifold-constrained "
                                  "hyper-connections (hc_mult); null: one plain residual")
    hc_sinkhorn_iters: Pos = _doc(20, "t_max: Sinkhorn steps making comb doubly stochastic "
                                  "(hc_sinkhorn_iters): 2·t_max − 1 normalisations")
    hc_mixing: Literal["sinkhorn", "none"] = _doc(
        "sinkhorn", "sinkhorn: DeepSeek-V4's mHC (pre, post and comb, x′ = post ⊗ y + combᵀ·x); "
        "none: Hunyuan 4's (pre and post only, x′ = post ⊗ y + x: no comb, no Sinkhorn)")
    gdn_neg_eigval: bool = _doc(False, "β = 2·σ(b) ∈ (0, 2): the delta rule's state transition "
                                "may have negative eigenvalues (OLMo-Hybrid's "
                                "linear_allow_neg_eigval)")
    kda_low_rank: bool = _doc(True, "KDA's forget and output gates through D_k, D → D_k → H·D_k "
                              "(Kimi-Linear), or one [D → H·D_k] matrix each (Ling 3.0)")
    kda_gate_bound: float | None = _doc(None, "KDA's bounded forget gate: g = bound·σ(e^{A_log}·"
                                        "(f + b_dt)) (Ling 3.0's kda_safe_gate, kda_lower_bound); "
                                        "null: g = −e^{A_log}·softplus(f + b_dt)")
    # Gemma 4: global layers of their own head width and KV heads, K=V there, v norms, and
    # per-layer embeddings (model/gemma4.py)
    global_head_dim: Pos | None = _doc(None, "Dh_g: each head's width on the full-attention "
                                       "layers (Gemma 4's global_head_dim); null: Dh")
    global_kv_heads: Pos | None = _doc(None, "H_kv_g: KV heads of the full-attention layers "
                                       "(num_global_key_value_heads); null: H_kv")
    global_k_eq_v: bool = _doc(False, "the full-attention layers have no v projection: v is k's "
                               "projection, before k's norm and RoPE (attention_k_eq_v)")
    v_norm: bool = _doc(False, "RMS over each head's Dh on v, no weights (Gemma 4's v_norm)")
    ple_dim: Pos | None = _doc(None, "D_p: per-layer embeddings of D_p a layer: a table "
                               "[N_vocab_p, N·D_p], a projection [D → N·D_p], and in each layer "
                               "a gate [D → D_p] and a projection [D_p → D] "
                               "(hidden_size_per_layer_input)")
    ple_vocab: Pos | None = _doc(None, "N_vocab_p: rows of the per-layer embedding table "
                                 "(vocab_size_per_layer_input)")
    kv_shared_layers: NonNeg = _doc(0, "the last n layers compute no K or V and cache nothing: "
                                    "each reads what the last earlier layer of its attention "
                                    "kind cached (Gemma 4's num_kv_shared_layers)")
    shared_ffn_wide: bool = _doc(False, "the KV-sharing layers' FFN is 2·Dff wide (Gemma 4's "
                                 "use_double_wide_mlp)")
    layer_scalar: bool = _doc(False, "each layer's output × a scalar the checkpoint holds as a "
                              "buffer (Gemma 4's layer_scalar): no parameter")

    @property
    def kv_heads(self) -> int:
        return self.n_kv_heads if self.n_kv_heads is not None else self.n_heads

    def global_layer(self, layer: int) -> bool:
        """The layer is a full-attention layer of Gemma 4's own global head width."""
        return (self.global_head_dim is not None and 0 <= layer < self.n_layers
                and (self.layer_types or ("full",) * self.n_layers)[layer] == "full")

    def layer_dh(self, layer: int) -> int:
        """Dh of one layer: Dh_g on a global layer, else Dh."""
        return self.global_head_dim if self.global_layer(layer) else self.dh  # type: ignore

    def layer_d_ff(self, layer: int) -> int:
        """Dff of one layer: 2·Dff on a KV-sharing layer with shared_ffn_wide."""
        wide = self.shared_ffn_wide and self.n_layers - self.kv_shared_layers <= layer
        return self.d_ff * (2 if wide and layer < self.n_layers else 1)

    @property
    def dh(self) -> int:
        """Each head's q/k width: head_dim, D/H, or MLA's D_n + D_r."""
        if self.mla:
            return self.qk_nope_head_dim + self.qk_rope_head_dim  # type: ignore[operator]
        return self.head_dim if self.head_dim is not None else self.d_model // self.n_heads

    def kv_heads_of(self, attention: str) -> int:
        """The KV heads of a layer of that attention kind (MiMo-V2-Flash's sliding layers)."""
        if attention == "sliding" and self.kv_heads_sliding is not None:
            return self.kv_heads_sliding
        return self.kv_heads

    @property
    def gated(self) -> bool:
        return self.ffn in ("swiglu", "geglu")

    @property
    def mixers(self) -> tuple[str, ...]:
        """Each layer's token mixer."""
        return self.mixer_types or ("attention",) * self.n_layers

    @property
    def ssm_inner(self) -> int:
        """I = H_s·D_s: Mamba-2's inner width (what the gate z and x each hold)."""
        return (self.ssm_heads or 0) * (self.ssm_head_dim or 0)

    @property
    def ssm_conv_dim(self) -> int:
        """D_conv = I + 2·G·N_s: the channels the convolution turns (x, B and C)."""
        return self.ssm_inner + 2 * self.ssm_groups * (self.ssm_state or 0)

    @property
    def mamba_inner(self) -> int:
        """D_i = e·D: Mamba-1's inner width (x and the gate z each; its conv channels)."""
        return (self.mamba_expand or 0) * self.d_model

    @property
    def gdn_conv_dim(self) -> int:
        """D_conv = 2·H_qk·D_qk + H_v·D_hv: the channels gated DeltaNet's convolution turns."""
        return (2 * (self.gdn_qk_heads or 0) * (self.gdn_qk_dim or 0)
                + (self.gdn_v_heads or 0) * (self.gdn_v_dim or 0))

    @property
    def moe(self) -> bool:
        return self.n_experts is not None

    @property
    def dff_expert(self) -> int:
        return self.d_ff_expert if self.d_ff_expert is not None else self.d_ff

    @property
    def dff_shared(self) -> int:
        return self.d_ff_shared if self.d_ff_shared is not None else self.dff_expert

    @property
    def mla(self) -> bool:
        return self.kv_lora_rank is not None

    @property
    def dsa(self) -> bool:
        """Attention is sparse: a lightning indexer selects each query's keys."""
        return self.index_topk is not None

    @property
    def indexer_layers(self) -> int:
        """The layers that run their own lightning indexer (and cache its keys); a sliding MLA
        layer runs none (dots3)."""
        if not self.dsa:
            return 0
        sliding = sum(t == "sliding" for t in self.layer_types or ())
        return self.mixers.count("attention") - sliding - len(set(self.index_shared_layers or ()))

    @property
    def block_sparse(self) -> bool:
        """Attention selects key blocks: a block indexer on (some of) the GQA layers."""
        return self.index_topk_blocks is not None

    @property
    def block_indexer_layers(self) -> tuple[int, ...]:
        """The layers that run the block indexer (and cache its key): default every layer (the
        rules refuse block_sparse_layers without the block fields)."""
        every = tuple(range(self.n_layers)) if self.block_sparse else ()
        return every if self.block_sparse_layers is None else self.block_sparse_layers

    @property
    def v_dim(self) -> int:
        """Each head's value width: Dh, or D_v (MLA's; MiMo-V2-Flash's narrower values)."""
        return self.v_head_dim if self.v_head_dim is not None else self.dh

    @property
    def has_norm_bias(self) -> bool:
        return self.norm_bias if self.norm_bias is not None else self.norm == "layernorm"

    def norm_kind(self, kind: str | None) -> str:
        """The kind a norm stage runs: `kind` where forward names one, else the model's norm
        (without norm_weights: x/RMS(x), an l2norm without γ)."""
        return kind or (self.norm if self.norm_weights else "l2norm")

    @property
    def rot(self) -> int:
        """R: the rotated width of each head: Dh unless partial rotary; MLA's decoupled D_r."""
        if self.mla:
            return self.qk_rope_head_dim  # type: ignore[return-value]
        return self.rotary_dim if self.rotary_dim is not None else self.dh
