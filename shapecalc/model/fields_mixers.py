"""The stateful token mixers' fields (Mamba-1/2, gated DeltaNet and KDA, short convolutions,
CCA and ZAYA's other mechanisms, Falcon-H1's parallel layers and μP multipliers): a base of
ModelFields, apart so that each file stays a readable table."""

from __future__ import annotations

from typing import Literal

from .record import Pos, PosFloat, Record, _doc

# a layer's token mixer (attention is AttentionKind's; none: a channel-mixer-only block)
MixerKind = Literal["attention", "mamba2", "gated_deltanet", "short_conv", "mamba1", "parallel",
                    "kda", "cca", "inkling", "none"]


class MixerFields(Record):
    """Each layer's token mixer and the stateful mixers' sizes."""

    # Stateful token mixers: each layer's mixer, and Mamba-2's sizes (state-space duality)
    mixer_types: tuple[MixerKind, ...] | None = _doc(
        None, "each layer's token mixer, in order: attention, mamba2, gated_deltanet, short_conv "
        "(LFM2's gated convolution), mamba1, parallel (attention and a Mamba-2 side by side, "
        "their outputs added: Falcon-H1), kda (Kimi Delta Attention: gated DeltaNet's fields "
        "with H_qk = H_v, D_qk = D_hv), cca (ZAYA's compressed convolutional attention: "
        "attention whose q/k pass two convs, its value half delayed a token), inkling "
        "(Inkling's attention with four short convs and a relative bias), or none (a block "
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
    # CCA (ZAYA): q and k through a depthwise then a per-head grouped causal conv, values
    # half this token's, half the previous token's (cca.py)
    cca_time0: Pos | None = _doc(None, "K_d: the kernel of CCA's depthwise q/k conv (cca_time0)")
    cca_time1: Pos | None = _doc(None, "K_g: the kernel of CCA's grouped q/k conv, each head's "
                                 "Dh channels mixed (cca_time1); the conv window keeps K_q = "
                                 "K_d + K_g − 2 tokens")
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
    # ZAYA's other mechanisms (zaya.py): its router, residual scaling and input scaling
    router_hidden: Pos | None = _doc(None, "D_rt: ZAYA's router: D → D_rt (bias), + the previous "
                                     "layer's (× a learned scale, from layer 1 on), RMSNorm, two "
                                     "GELU layers D_rt → D_rt (biases), → E + 1 scores, the last "
                                     "a skip expert that computes nothing (router_hidden_size)")
    residual_scaling: bool = _doc(False, "each residual add is (y + b_y)·s_y + (x + b_x)·s_x, "
                                  "4 learned vectors of D (ZAYA's ZayaResidualScaling)")
    embedding_affine: bool = _doc(False, "the embeddings → (x + b)·s, b and s learned vectors "
                                  "of D (ZAYA's input_hidden_states_bias and _scale)")
    # Inkling (inkling.py): attention with short convs on k, v and each branch's output, a bias
    # from the hidden states by distance, shared experts in the softmax; its sliding layers'
    # own H, H_kv and Dh are layer_widths'
    rel_dim: Pos | None = _doc(None, "D_rel: each head's relative state r = h·W_r [D → H·D_rel], "
                               "mixing D_rel bias profiles (Inkling's d_rel)")
    rel_extent: Pos | None = _doc(None, "X_rel: the distances a full layer's bias covers, its "
                                  "profiles [D_rel, X_rel] (rel_extent); a sliding layer's: W")
    log_scaling_floor: Pos | None = _doc(None, "n_f: a full layer's q and bias × τ = 1 + "
                                         "α·ln(max(1, (pos+1)/n_f)) (log_scaling_n_floor)")
    log_scaling_alpha: float = _doc(0.1, "α of log_scaling_floor (log_scaling_alpha)")
