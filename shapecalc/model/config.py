"""ModelConfig and Workload: validated once, at the edge; every rule has its message here.

Field names follow the seeds (`d_model` prints as D, `n_kv_heads` as H_kv, …) so that config files
stay portable. After `check()` passes, everything downstream trusts its input.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic_core import ValidationError

from . import rules
from .errors import ShapecalcError
from .record import NonNeg, Pos, PosFloat, Record, _doc, _req
from .suggest import canonical_dtype, did_you_mean

# Bits per element. int4 packs two values per byte, so bytes are rounded up per tensor.
DTYPE_BITS: dict[str, int] = {
    "fp32": 32,
    "bf16": 16,
    "fp16": 16,
    "fp8": 8,
    "int8": 8,
    "int4": 4,
}
DTYPE_FIELDS = ("dtype", "kv_dtype", "act_dtype")  # aliases accepted: model/suggest.py
MAX_LAYERS = 100_000  # N: the layer plan holds every layer's kind
MLA_DEFAULT = "absorbed"  # MLA's cache and decode form unless mla_form says (vLLM's, FlashMLA's)
Dtype = Literal["fp32", "bf16", "fp16", "fp8", "int8", "int4"]
WIDE_DTYPES = ("fp32", "bf16", "fp16")


# How engines (vLLM, TensorRT-LLM) run weights of each width: fp8, int8 and int4 weights keep
# activations and all-reduces in 16 bits (bf16); fp8 weights run W8A8 GEMMs at the fp8 peak,
# int8 and int4 are weight-only, dequantised into 16-bit GEMMs. The one home of these defaults.
def act_width(dtype: str) -> str:
    """The activations' dtype for weights in `dtype` (unless --act-dtype says)."""
    return dtype if dtype in WIDE_DTYPES else "bf16"


def compute_width(dtype: str, act: str) -> str:
    """The dtype whose peak FLOP/s the GEMMs reach: fp8 for fp8 weights (W8A8), else the
    activations'."""
    return "fp8" if dtype == "fp8" else act
AttentionKind = Literal["full", "sliding", "chunked"]
FfnKind = Literal["dense", "moe"]


def ceil_div(a: int, b: int) -> int:
    """⌈a/b⌉ in exact integers (shards, blocks, ring chunks)."""
    return -(-a // b)


def bytes_of(elements: Any, bits: Any) -> Any:
    """⌈elements·bits/8⌉: exact bytes (ints, or NumPy arrays of them)."""
    return (elements * bits + 7) // 8


def nbytes(elements: int, dtype: str) -> int:
    """Exact bytes of `elements` values stored in `dtype` (int4: two per byte, rounded up)."""
    return bytes_of(elements, DTYPE_BITS[dtype])


class ModelConfig(Record):
    """A decoder-only Transformer. Symbols in brackets are what the trace prints."""

    name: str = _doc("custom")
    vocab_size: Pos = _req("N_vocab: vocabulary size")
    d_model: Pos = _req("D: model width")
    n_layers: Pos = _req("N: number of Transformer blocks")
    n_heads: Pos = _req("H: query heads")
    n_kv_heads: Pos | None = _doc(None, "H_kv: key/value heads (default H; 1 = MQA; between = GQA)")
    head_dim: Pos | None = _doc(None, "Dh: head width (default D/H)")
    d_ff: Pos = _req("Dff: FFN hidden width")
    ffn: Literal["gelu", "relu", "swiglu", "geglu"] = _doc(
        "gelu", "gelu/relu: up, down; swiglu/geglu: gate, up, down"
    )
    norm: Literal["layernorm", "rmsnorm"] = _doc("layernorm")
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
    lm_head_bias: bool = _doc(False)
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
    attn_output_gate: bool = _doc(
        False, "the attention output × sigmoid(x·W_g), W_g [D, H·Dh], before WO (AFMoE)"
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
    router_scoring: Literal["softmax", "sigmoid", "topk_sigmoid"] = _doc(
        "softmax", "how router logits become scores (topk_sigmoid: the top k logits, then a "
        "sigmoid of those k, as Llama 4)"
    )
    norm_topk_prob: bool = _doc(False, "the k chosen scores are renormalised to sum to 1")
    routed_scaling_factor: PosFloat | None = _doc(
        None, "the routed experts' output is scaled by this (DeepSeek)"
    )
    ffn_types: tuple[FfnKind, ...] | None = _doc(
        None,
        "each layer's FFN, in order: dense or moe; default: every layer moe when n_experts "
        "is set, else dense",
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
    def v_dim(self) -> int:
        """Each head's value width: Dh, or MLA's D_v."""
        return self.v_head_dim if self.mla else self.dh  # type: ignore[return-value]

    @property
    def has_norm_bias(self) -> bool:
        return self.norm_bias if self.norm_bias is not None else self.norm == "layernorm"

    @property
    def rot(self) -> int:
        """R: the rotated width of each head: Dh unless partial rotary; MLA's decoupled D_r."""
        if self.mla:
            return self.qk_rope_head_dim  # type: ignore[return-value]
        return self.rotary_dim if self.rotary_dim is not None else self.dh

    def _check(self) -> None:
        if self.n_layers > MAX_LAYERS:  # the layer plan lists each layer: 10⁸ took minutes and GiB
            raise ShapecalcError("n_layers", f"N={self.n_layers:,} is more than the {MAX_LAYERS:,} "
                                 "layers shapecalc lists (published models have at most a few "
                                 "hundred)")
        if self.head_dim is None and not self.mla and self.d_model % self.n_heads:
            raise ShapecalcError(
                "n_heads",
                f"D={self.d_model} is not divisible by H={self.n_heads}; "
                "set head_dim to use heads narrower or wider than D/H",
            )
        if self.n_heads % self.kv_heads:
            raise ShapecalcError(
                "n_kv_heads",
                f"H={self.n_heads} is not divisible by H_kv={self.kv_heads}; "
                "each KV head must serve a whole group of query heads",
            )
        if self.positions == "rope" and not self.mla and self.dh % 2:
            raise ShapecalcError("head_dim", f"RoPE rotates pairs, so Dh={self.dh} must be even")
        if self.positions == "learned" and self.max_positions is None:
            raise ShapecalcError("max_positions", "a learned position table needs its row count")
        if self.parallel_block and self.norm_position != "pre":
            raise ShapecalcError(
                "parallel_block", "a parallel block reads one pre-norm; it needs norm_position pre"
            )
        if self.layer_types is not None:
            if len(self.layer_types) != self.n_layers:
                raise ShapecalcError(
                    "layer_types",
                    f"lists {len(self.layer_types)} layers, but N={self.n_layers}",
                )
            slides = "sliding" in self.layer_types
            if slides and self.sliding_window is None:
                raise ShapecalcError("layer_types", "sliding layers need sliding_window (W)")
            if not slides and self.sliding_window is not None:
                raise ShapecalcError(
                    "sliding_window", "is set, but no layer in layer_types is sliding"
                )
        # each variant's rules (rules.py)
        rules.check_llama4(self)
        rules.check_moe(self)
        rules.check_classic(self)
        rules.check_mla(self)
        rules.check_gemma(self)
        if self.positions == "sinusoidal" and self.d_model % 2:
            raise ShapecalcError(
                "d_model", f"sinusoidal positions need an even D, not {self.d_model}"
            )


class Workload(Record):
    """What the model is asked to do: B sequences of T tokens, in one phase, on p×s devices."""

    batch: Pos = _doc(1, "B: sequences in the batch")
    seq: Pos = _doc(
        2048,
        "T: prefill: prompt tokens; decode: tokens already in the KV cache "
        "(the new token reads T′ = T+1 keys)",
    )
    phase: Literal["prefill", "decode"] = _doc("prefill")
    dtype: Dtype = _doc("bf16", "weights; activations too when 16 or 32 bits wide")
    act_dtype: Dtype | None = _doc(
        None, "activations and all-reduce buffers (default: dtype when 16 or 32 bits wide, else "
        "bf16, as engines run fp8, int8 and int4 weights)")
    kv_dtype: Dtype | None = _doc(None, "KV cache (default: the activations' dtype)")
    logits: Literal["all", "last"] = _doc(
        "all", "all: every position, as a forward does; last: generation only"
    )
    tp: Pos = _doc(1, "p: tensor-parallel degree")
    pp: Pos = _doc(1, "s: pipeline stages")
    block_size: Pos = _doc(16, "tokens per block of a paged KV cache")
    attention_flops: Literal["full", "causal"] = _doc(
        "full", "full: the whole [T,T] as the seeds count; causal: lower triangle"
    )
    padding_mask: bool = _doc(False, "list the [B,1,1,T] padding mask stage")
    ep: Pos = _doc(
        1, "expert-parallel degree: the routed experts split over ep ranks (E/ep each)"
    )
    mla_form: Literal["absorbed", "latent", "expanded"] | None = _doc(
        None,
        "MLA models only: the cache and decode form (default absorbed): absorbed (latent "
        "cache, decode in the latent space: vLLM, SGLang, FlashMLA), latent (latent cache "
        "re-expanded by kv_b_proj every step: transformers 5.x), expanded (K and V of every "
        "head cached)",
    )

    @property
    def act(self) -> str:
        return self.act_dtype or act_width(self.dtype)

    @property
    def kv(self) -> str:
        return self.kv_dtype or self.act

    @property
    def compute(self) -> str:
        """The dtype whose peak the GEMMs run at."""
        return compute_width(self.dtype, self.act)

    @property
    def mla(self) -> str:
        """MLA's form: absorbed unless mla_form says otherwise."""
        return self.mla_form or MLA_DEFAULT


def check(model: ModelConfig, wl: Workload) -> None:
    """Rules that need both the model and the workload."""
    p = wl.tp
    if model.n_heads % p:
        raise ShapecalcError("tp", f"p={p} does not divide H={model.n_heads} query heads")
    if model.d_ff % p:
        raise ShapecalcError("tp", f"p={p} does not divide Dff={model.d_ff}")
    hkv = model.kv_heads
    # vLLM: with fewer KV heads than ranks each rank holds one replicated KV head.
    if hkv >= p and hkv % p:
        raise ShapecalcError("tp", f"p={p} does not divide H_kv={hkv} key/value heads")
    if hkv < p and p % hkv:
        raise ShapecalcError(
            "tp", f"p={p} is not a multiple of H_kv={hkv}, so KV heads cannot be replicated evenly"
        )
    if model.moe:
        if model.dff_expert % p:
            raise ShapecalcError("tp", f"p={p} does not divide Dff_e={model.dff_expert}")
        if (model.n_shared_experts * model.dff_shared) % p:
            raise ShapecalcError("tp", f"p={p} does not divide the shared experts' width "
                                 f"{model.n_shared_experts * model.dff_shared}")
    if wl.ep > 1:
        if not model.moe:
            raise ShapecalcError("ep", "expert parallelism needs a Mixture-of-Experts model")
        assert model.n_experts is not None
        if model.n_experts % wl.ep:
            raise ShapecalcError("ep", f"ep={wl.ep} does not divide E={model.n_experts} experts")
        if wl.ep % p:
            raise ShapecalcError("ep", f"ep={wl.ep} is not a multiple of tp={p}: the ep GPUs "
                                 "hold ep/tp tensor-parallel replicas of the attention")
    if wl.mla_form is not None and not model.mla:
        raise ShapecalcError("mla_form", "applies to Multi-head Latent Attention models only "
                             "(kv_lora_rank set)")
    if p > 1 and model.qk_norm and model.qk_norm_width == "all":
        # vLLM all-gathers q and k for OLMo 2's norm; that traffic is not modelled
        raise ShapecalcError("tp", f"p={p}: q/k norms over the whole width (qk_norm_width all, "
                             "OLMo 2) need every head's values on one rank; use tp 1")
    if wl.pp > model.n_layers:
        raise ShapecalcError("pp", f"s={wl.pp} pipeline stages exceed N={model.n_layers} layers")
    if model.positions == "learned" and model.max_positions is not None:
        last = wl.seq + (1 if wl.phase == "decode" else 0)
        if last > model.max_positions:
            raise ShapecalcError(
                "seq",
                f"{last} positions exceed the learned position table of "
                f"max_positions={model.max_positions}; the largest valid seq is "
                f"{model.max_positions - (last - wl.seq)}",
            )


def first_error(err: ValidationError, prefix: str = "") -> ShapecalcError:
    """One clear line from pydantic's report: the field, then the reason."""
    e = err.errors()[0]
    loc = ".".join(str(x) for x in e["loc"])
    msg = e["msg"]
    if e["type"] == "extra_forbidden":
        msg = "unknown field"
    elif e["type"] == "literal_error":
        msg = f"{e['input']!r} is not one of {msg.split('Input should be ')[-1]}"
        msg += did_you_mean(e["input"], re.findall(r"'([^']*)'", e.get("ctx", {}).get("expected",
                                                                                   "")))
    elif e["type"] == "string_pattern_mismatch":  # record.py: a control character
        msg = f"{e['input']!r} contains a control character"  # repr: visible escapes
    name = f"{prefix}{loc}" if loc else (prefix.rstrip(".") or "config")
    return ShapecalcError(name, msg)


def make_workload(fields: dict[str, Any]) -> Workload:
    """A Workload from loose fields (None means: not given), or one clear error line."""
    fields = {k: canonical_dtype(v, DTYPE_BITS) if k in DTYPE_FIELDS else v
              for k, v in fields.items()}
    try:
        return Workload.model_validate({k: v for k, v in fields.items() if v is not None})
    except ValidationError as e:
        raise first_error(e) from None
