"""ModelConfig's fields, each with its symbol and meaning, and the sizes they imply (D/H, the
expert widths, …). config.py's ModelConfig adds the rules between fields (its own and rules.py's):
rules.py reads a ModelFields, so neither imports the other's module in a circle."""

from __future__ import annotations

from typing import Literal

from .quantization import Quantization
from .record import NonNeg, Pos, PosFloat, Record, _doc, _req

AttentionKind = Literal["full", "sliding", "chunked", "hca", "csa"]
FfnKind = Literal["dense", "moe", "none"]
# a layer's token mixer (attention is AttentionKind's; none: a channel-mixer-only block)
MixerKind = Literal["attention", "mamba2", "gated_deltanet", "short_conv", "mamba1", "parallel",
                    "kda", "cca", "none"]



class ModelFields(Record):
    """ModelConfig's fields and what they imply (config.py adds the rules between them)."""

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
    v_head_dim: Pos | None = _doc(None, "D_v: each head's value width")
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
    quantization: Quantization | None = _doc(None, "how the checkpoint stores its weights "
                                            "(quantization_config): their dtype and bytes")

    # Stateful token mixers: each layer's mixer, and Mamba-2's sizes (state-space duality)
    mixer_types: tuple[MixerKind, ...] | None = _doc(
        None, "each layer's token mixer, in order: attention, mamba2, gated_deltanet, short_conv "
        "(LFM2's gated convolution), mamba1, parallel (attention and a Mamba-2 side by side, "
        "their outputs added: Falcon-H1), kda (Kimi Delta Attention: gated DeltaNet's fields "
        "with H_qk = H_v, D_qk = D_hv), cca (ZAYA's compressed convolutional attention: "
        "attention whose q/k pass two convs, its value half delayed a token), or none (a block "
        "of its channel mixer only); default: attention in every layer")
    ssm_heads: Pos | None = _doc(None, "H_s: Mamba-2 heads (mamba_num_heads)")
    ssm_head_dim: Pos | None = _doc(None, "D_s: each Mamba-2 head's width; the inner width is "
                                    "H_s·D_s (mamba_head_dim)")
    ssm_groups: Pos = _doc(1, "G: groups of heads sharing one B and one C (n_groups)")
    ssm_state: Pos | None = _doc(None, "N_s: the state each head channel carries "
                                 "(ssm_state_size, d_state)")
    conv_kernel: Pos | None = _doc(None, "K_c: the causal depthwise convolution's kernel "
                                   "(LFM2's conv_L_cache)")
    conv_bias: bool = _doc(True, "a bias on the convolution (use_conv_bias)")
    scan_chunk: Pos | None = _doc(None, "L: the chunk of the chunked scan (chunk_size): prefill "
                                  "pads T up to whole chunks, T_L = L·⌈T/L⌉")
    # gated DeltaNet (Qwen3-Next, Qwen3.5): the delta rule with a decay gate, linear attention
    gdn_qk_heads: Pos | None = _doc(None, "H_qk: gated DeltaNet query/key heads "
                                    "(linear_num_key_heads)")
    gdn_v_heads: Pos | None = _doc(None, "H_v: value heads, H_qk dividing them "
                                   "(linear_num_value_heads)")
    gdn_qk_dim: Pos | None = _doc(None, "D_qk: a query/key head's width (linear_key_head_dim)")
    gdn_v_dim: Pos | None = _doc(None, "D_hv: a value head's width (linear_value_head_dim); the "
                                 "state of each value head is D_qk × D_hv")
    gdn_fused_proj: bool = _doc(True, "gated DeltaNet's input projections fused in two, [D → "
                                "q, k, v, z] and [D → b, a] (Qwen3-Next), or four (Qwen3.5: "
                                "in_proj_qkv, _z, _b, _a); changes the listing, not the numbers")
    # Mamba-1 (Jamba): the selective scan, a state N_s per channel of the inner width D_i = e·D
    mamba_expand: Pos | None = _doc(None, "e: Mamba-1's expansion; its inner width D_i = e·D "
                                    "(mamba_expand)")
    mamba_dt_rank: Pos | None = _doc(None, "R_dt: the rank of Mamba-1's Δ projection, x_proj "
                                     "[D_i → R_dt + 2·N_s] then dt_proj [R_dt → D_i] "
                                     "(mamba_dt_rank)")
    mamba_proj_bias: bool = _doc(False, "biases on Mamba-1's in_proj and out_proj "
                                 "(mamba_proj_bias)")
    mamba_bcdt_norm: bool = _doc(False, "RMSNorms on Mamba-1's Δ, B and C after x_proj "
                                 "(Jamba's dt_layernorm, b_layernorm, c_layernorm)")
    # Falcon-H1's parallel layers and its μP multipliers (each None: 1, no stage)
    ssm_gated_norm: bool = _doc(True, "Mamba-2's gated RMSNorm(y ⊙ silu(z)); false: y ⊙ "
                                "silu(z) alone (Falcon-H1's mamba_rms_norm)")
    ssm_in_multiplier: PosFloat | None = _doc(None, "Mamba-2's input × this (Falcon-H1)")
    ssm_out_multiplier: PosFloat | None = _doc(None, "a parallel layer's Mamba-2 output × this")
    ssm_multipliers: tuple[PosFloat, PosFloat, PosFloat, PosFloat, PosFloat] | None = _doc(
        None, "in_proj's parts z, x, B, C, dt × these (Falcon-H1's μP vector)")
    attention_in_multiplier: PosFloat | None = _doc(None, "a parallel layer's attention input "
                                                    "× this")
    attention_out_multiplier: PosFloat | None = _doc(None, "a parallel layer's attention "
                                                     "output × this")
    key_multiplier: PosFloat | None = _doc(None, "k × this after its projection (Falcon-H1)")
    mlp_multipliers: tuple[PosFloat, PosFloat] | None = _doc(
        None, "the FFN's gate × the first before its activation, its output × the second "
        "(Falcon-H1)")
    attn_output_gate: bool = _doc(False, "attention's output × sigmoid(x·W_g), W_g [D, H·Dh] "
                                  "(Qwen3-Next: q_proj's second half)")
    # CCA (ZAYA): q and k through a depthwise then a per-head grouped causal conv, values
    # half this token's, half the previous token's (cca.py)
    cca_time0: Pos | None = _doc(None, "K_d: the kernel of CCA's depthwise q/k conv (cca_time0)")
    cca_time1: Pos | None = _doc(None, "K_g: the kernel of CCA's grouped q/k conv, each head's "
                                 "Dh channels mixed (cca_time1); the conv window keeps K_q = "
                                 "K_d + K_g − 2 tokens")
    # ZAYA's other mechanisms (zaya.py): its router, residual scaling and input scaling
    router_hidden: Pos | None = _doc(None, "D_rt: ZAYA's router: D → D_rt (bias), + the previous "
                                     "layer's (× a learned scale, from layer 1 on), RMSNorm, two "
                                     "GELU layers D_rt → D_rt (biases), → E + 1 scores, the last "
                                     "a skip expert that computes nothing (router_hidden_size)")
    residual_scaling: bool = _doc(False, "each residual add is (y + b_y)·s_y + (x + b_x)·s_x, "
                                  "4 learned vectors of D (ZAYA's ZayaResidualScaling)")
    embedding_affine: bool = _doc(False, "the embeddings → (x + b)·s, b and s learned vectors "
                                  "of D (ZAYA's input_hidden_states_bias and _scale)")
    attn_head_gate: bool = _doc(False, "each head's attention output × sigmoid(x·W_g), W_g [D, H]: "
                                "one gate a head (LFM3's g_proj; Ling 3.0's MLA g_proj)")
    # routing and activation variants (DeepSeek-V4, Laguna)
    router_softcap: PosFloat | None = _doc(None, "c: router logits ← c·tanh(logits/c) before "
                                           "the scoring (moe_router_logit_softcapping)")
    layer_heads: tuple[Pos, ...] | None = _doc(None, "H_ℓ: each layer's query heads, K and V "
                                               "keeping H_kv (Laguna); null: H on every layer")
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

    @property
    def kv_heads(self) -> int:
        return self.n_kv_heads if self.n_kv_heads is not None else self.n_heads

    @property
    def dh(self) -> int:
        """Each head's q/k width: head_dim, D/H, or MLA's D_n + D_r."""
        if self.mla:
            return self.qk_nope_head_dim + self.qk_rope_head_dim  # type: ignore[operator]
        return self.head_dim if self.head_dim is not None else self.d_model // self.n_heads

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
        """The layers that run their own lightning indexer (and cache its keys)."""
        if not self.dsa:
            return 0
        return self.mixers.count("attention") - len(set(self.index_shared_layers or ()))

    @property
    def v_dim(self) -> int:
        """Each head's value width: Dh, or MLA's D_v."""
        return self.v_head_dim if self.mla else self.dh  # type: ignore[return-value]

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
