"""ModelConfig's fields, each with its symbol and meaning (in three classes, one the base of the
next: fields_core.py, fields_mixers.py, this one), and the sizes they imply (D/H, the
expert widths, …). config.py's ModelConfig adds the rules between fields (its own and rules.py's):
rules.py reads a ModelFields, so neither imports the other's module in a circle."""

from __future__ import annotations

from typing import Literal

from .fields_mixers import MixerFields, MixerKind  # noqa: F401  (MixerKind: re-exported)
from .record import NonNeg, Pos, PosFloat, _doc


class ModelFields(MixerFields):
    """ModelConfig's fields and what they imply (config.py adds the rules between them): the
    first in fields_core.CoreFields, the stateful token mixers' in fields_mixers.MixerFields,
    these last (one order: CoreFields', MixerFields', then these)."""

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
