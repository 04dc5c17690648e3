"""ModelConfig and Workload: validated once, at the edge; every rule has its message here.

Field names follow the seeds (`d_model` prints as D, `n_kv_heads` as H_kv, …) so that config files
stay portable. After `check()` passes, everything downstream trusts its input.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic_core import ValidationError

from . import conventions, rules, rules_inkling
from .errors import ShapecalcError
from .model_fields import ModelFields
from .quantization import DTYPE_FORMATS
from .record import Pos, Record, _doc
from .suggest import canonical_dtype, did_you_mean
from .widths import check_widths

# Bits per element. int4 packs two values per byte, so bytes are rounded up per tensor. mxfp4,
# nvfp4 and nf4 are weight formats with block scales: their weights' bytes are quantization's
# tensor by tensor (model/quant.py), never params × 4 bits.
DTYPE_BITS: dict[str, int] = {"fp32": 32, "bf16": 16, "fp16": 16, "fp8": 8, "int8": 8, "int4": 4,
                              "mxfp4": 4, "nvfp4": 4, "nf4": 4}
# aliases accepted: model/suggest.py
DTYPE_FIELDS = ("dtype", "kv_dtype", "act_dtype", "state_dtype")
MAX_LAYERS = 100_000  # N: the layer plan holds every layer's kind
MLA_DEFAULT = "absorbed"  # MLA's cache and decode form unless mla_form says (vLLM's, FlashMLA's)
Dtype = Literal["fp32", "bf16", "fp16", "fp8", "int8", "int4", "mxfp4", "nvfp4", "nf4"]
WIDE_DTYPES = ("fp32", "bf16", "fp16")


# How engines (vLLM, TensorRT-LLM) run weights of each width: fp8, int8 and int4 weights keep
# activations and all-reduces in 16 bits (bf16); fp8 weights run W8A8 GEMMs at the fp8 peak,
# int8 and int4 are weight-only, dequantised into 16-bit GEMMs. The one home of these defaults.
def act_width(dtype: str) -> str:
    """The activations' dtype for weights in `dtype` (unless --act-dtype says)."""
    return dtype if dtype in WIDE_DTYPES else "bf16"


def compute_width(dtype: str, act: str) -> str:
    """The dtype whose peak FLOP/s the GEMMs reach: fp8 for fp8 weights (W8A8), nvfp4 for nvfp4
    weights (W4A4: modelopt's input scales quantize the activations), else the activations'
    (mxfp4, nf4, int8, int4: weight-only, dequantised into 16-bit GEMMs)."""
    return dtype if dtype in ("fp8", "nvfp4") else act
def ceil_div(a: int, b: int) -> int:
    """⌈a/b⌉ in exact integers (shards, blocks, ring chunks)."""
    return -(-a // b)


def bytes_of(elements: Any, bits: Any) -> Any:
    """⌈elements·bits/8⌉: exact bytes (ints, or NumPy arrays of them)."""
    x = elements * bits
    if getattr(x, "dtype", None) is not None and x.dtype.kind == "i":
        # in place (x is the product's own array): a sweep makes ~4,000 calls on 16k points;
        # ⌊x/8⌋ as a shift, exact, a third cheaper than // on int64
        x += 7
        x >>= 3
        return x
    return (x + 7) // 8


def nbytes(elements: int, dtype: str) -> int:
    """Exact bytes of `elements` values stored in `dtype` (int4: two per byte, rounded up)."""
    return bytes_of(elements, DTYPE_BITS[dtype])


class ModelConfig(ModelFields):
    """A decoder-only Transformer. Symbols in brackets are what the trace prints."""

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
            slides = bool({"sliding", "hca", "csa"} & set(self.layer_types))  # a window too
            if slides and self.sliding_window is None:
                raise ShapecalcError("layer_types", "sliding layers need sliding_window (W)")
            if not slides and self.sliding_window is not None:
                raise ShapecalcError(
                    "sliding_window", "is set, but no layer in layer_types is sliding"
                )
        if self.layer_widths is not None:  # dots3's per_layer_config
            check_widths(self.layer_widths, self.n_layers, self)
        # each variant's rules (rules.py)
        rules.check_llama4(self)
        rules.check_moe(self)
        rules.check_classic(self)
        rules.check_mla(self)
        rules.check_gemma(self)
        rules.check_mixers(self)
        rules.check_hyper(self)
        rules.check_shared_kv(self)
        rules.check_zaya(self)
        rules_inkling.check_inkling(self)
        rules.check_sliding_heads(self)
        rules.check_block_sparse(self)
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
    phase: Literal["prefill", "decode"] = _doc(
        "prefill", "prefill: the T prompt tokens at once; decode: one token after T cached")
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
        "full", "full: the whole [T,T] as eager attention computes it; causal: lower triangle"
    )
    padding_mask: bool = _doc(False, "list the [B,1,1,T] padding mask stage")
    ep: Pos = _doc(
        1, "expert-parallel degree: the routed experts split over ep ranks (E/ep each)"
    )
    mtp: bool = _doc(False, "trace the multi-token-prediction modules too (their stages in group "
                     "mtp; totals.mtp_flops), after the model's own step")
    mla_form: Literal["absorbed", "latent", "expanded"] | None = _doc(
        None,
        "MLA models only: the cache and decode form (default absorbed): absorbed (latent "
        "cache, decode in the latent space: vLLM, SGLang, FlashMLA), latent (latent cache "
        "re-expanded by kv_b_proj every step: transformers 5.x), expanded (K and V of every "
        "head cached)",
    )
    mixer_flops: Literal["transformers-torch", "fused"] | None = _doc(
        None, "stateful token mixers only: how their FLOPs are counted (default "
        "transformers-torch: FlopCounterMode on transformers' torch path; fused: what mamba_ssm's "
        "and flash-linear-attention's kernels compute)")
    state_cache: Literal["transformers", "vllm"] | None = _doc(
        None, "stateful token mixers only: whose state cache the bytes follow (default "
        "transformers: a conv window of K_c inputs, an fp32 recurrent state; vllm: K_c − 1 "
        "columns, the recurrent state in state_dtype)")
    state_dtype: Dtype | None = _doc(
        None, "state_cache vllm only: the recurrent state's dtype, vLLM's mamba_ssm_cache_dtype "
        "(default auto: the conv state's, the activations' dtype)")

    selection: Literal["eager", "sparse"] = _doc(
        "eager", "DeepSeek Sparse Attention models only: how the selected attention is "
        "counted: eager (transformers and DeepSeek's reference code: dense scores over every "
        "key, the unselected masked), sparse (a sparse kernel, FlashMLA's: each query reads "
        "only its K_sel selected latents, absorbed, in prefill and decode)")

    def _check(self) -> None:
        # their bytes would miss the block scales
        for name in ("kv_dtype", "act_dtype", "state_dtype"):
            if getattr(self, name) in DTYPE_FORMATS:
                raise ShapecalcError(name, f"{getattr(self, name)} is a weight format (4-bit "
                                     "blocks with scales); give fp32, bf16, fp16, fp8 or int8")

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


def check(model: ModelConfig, wl: Workload, redundant: int = 0) -> None:
    """Rules that need both the model and the workload (`redundant`: EPLB's extra expert
    copies, which ep splits with the experts: serve --redundant-experts)."""
    p = wl.tp
    if model.shared_kv:  # DeepSeek-V4's attention: as transformers runs it
        for key, bad in (("attention_flops", wl.attention_flops == "causal"),
                         ("padding_mask", wl.padding_mask)):
            if bad:
                raise ShapecalcError(key, "DeepSeek-V4's attention (shared_kv) is modelled "
                                     "eager (all scores), without padding")
        if (model.o_groups or 1) % p:  # its heads split, so are the output's groups
            raise ShapecalcError("tp", f"p={p} does not divide g={model.o_groups} output groups")
    if model.n_heads % p:
        raise ShapecalcError("tp", f"p={p} does not divide H={model.n_heads} query heads")
    for h in (model.layer_widths.n_heads or ()) if model.layer_widths else ():
        if h % p:  # a layer of its own heads (dots3's sliding layers)
            raise ShapecalcError("tp", f"p={p} does not divide a layer's H={h} query heads")
    if model.d_ff % p:
        raise ShapecalcError("tp", f"p={p} does not divide Dff={model.d_ff}")
    # a layer of its own KV heads (layer_widths.n_kv_heads) splits as the model's do
    for hkv in dict.fromkeys((model.kv_heads, *((model.layer_widths.n_kv_heads or ())
                                                if model.layer_widths else ()))):
        # vLLM: with fewer KV heads than ranks each rank holds one replicated KV head.
        if hkv >= p and hkv % p:
            raise ShapecalcError("tp", f"p={p} does not divide H_kv={hkv} key/value heads")
        if hkv < p and p % hkv:
            raise ShapecalcError("tp", f"p={p} is not a multiple of H_kv={hkv}, so KV heads "
                                 "cannot be replicated evenly")
    # the stateful mixers split by heads, as vLLM does: each rank whole groups (Mamba-2's B, C;
    # gated DeltaNet's q/k heads and their value heads)
    if "mamba2" in model.mixers and model.ssm_groups % p:
        raise ShapecalcError("tp", f"p={p} does not divide G={model.ssm_groups} Mamba-2 groups")
    if p > 1 and "mamba1" in model.mixers:  # vLLM's x_proj is row-parallel: one more all-reduce
        raise ShapecalcError("tp", f"p={p}: Mamba-1 layers are traced on one rank only so far; "
                             "give --tp 1")
    if p > 1 and "parallel" in model.mixers:
        raise ShapecalcError("tp", f"p={p}: parallel (attention ∥ Mamba-2) layers are traced on "
                             "one rank only so far; give --tp 1")
    if {"gated_deltanet", "kda"} & set(model.mixers) and (model.gdn_qk_heads or 0) % p:
        raise ShapecalcError("tp", f"p={p} does not divide H_qk={model.gdn_qk_heads} gated "
                             "DeltaNet q/k heads")
    if "short_conv" in model.mixers and model.d_model % p:
        raise ShapecalcError("tp", f"p={p} does not divide the D={model.d_model} short-conv "
                             "channels")
    if "cca" in model.mixers and p > 1:  # its value halves interleave the KV heads' channels
        raise ShapecalcError("tp", "CCA layers under tensor parallelism are not modelled (the "
                             "value's two halves do not split by KV head)")
    if "inkling" in model.mixers and p > 1:
        raise ShapecalcError("tp", "Inkling's layers under tensor parallelism are not modelled "
                             "(its layers' convs, bias profiles and shared experts' weights)")
    if "cca" in model.mixers and wl.state_cache == "vllm":
        raise ShapecalcError("state_cache", "vllm: no vLLM layout of CCA's state is modelled "
                             "(transformers' conv window and delayed value only)")
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
        if (model.n_experts + redundant) % wl.ep:
            raise ShapecalcError("ep", f"ep={wl.ep} does not divide E={model.n_experts} experts"
                                 + (f" + {redundant} redundant" if redundant else ""))
        if wl.ep % p:
            raise ShapecalcError("ep", f"ep={wl.ep} is not a multiple of tp={p}: the ep GPUs "
                                 "hold ep/tp tensor-parallel replicas of the attention")
    if wl.mtp and (not model.mtp_layers or wl.pp > 1):
        raise ShapecalcError("mtp", "the multi-token-prediction modules are traced at pp = 1"
                             if model.mtp_layers else "the model has none (mtp_layers = 0)")
    if wl.mla_form is not None and not model.mla:
        raise ShapecalcError("mla_form", "applies to Multi-head Latent Attention models only "
                             "(kv_lora_rank set)")
    stateful = conventions.has_convention(model.mixers)
    for name in ("mixer_flops", "state_cache"):
        if getattr(wl, name) is not None and not stateful:
            raise ShapecalcError(name, "applies to models with stateful token mixers ("
                                 + ", ".join(sorted(conventions.STATEFUL_MIXERS))
                                 + "); this one has none")
    for name, other in (("mixer_flops", conventions.FUSED), ("state_cache", "vllm")):
        if getattr(wl, name) == other and (left := conventions.unwired(model.mixers)):
            raise ShapecalcError(name, f"{other}: the {', '.join(left)} layers' rules count "
                                 "transformers' torch path and cache only (not yet this one)")
    if (wl.mixer_flops == conventions.FUSED and "gated_deltanet" in model.mixers
            and model.scan_chunk != conventions.FLA_CHUNK):
        raise ShapecalcError("mixer_flops", f"fused: flash-linear-attention's fused gated delta "
                             f"rule runs chunks of {conventions.FLA_CHUNK} (BT), not "
                             f"L={model.scan_chunk}")
    if wl.state_dtype is not None and wl.state_cache != "vllm":
        raise ShapecalcError("state_dtype", "is vLLM's mamba_ssm_cache_dtype: it needs "
                             "state_cache vllm (transformers keeps the recurrent state in fp32)")
    if wl.selection == "sparse" and not (model.dsa or model.block_sparse):
        raise ShapecalcError("selection", "applies to DeepSeek Sparse Attention models only "
                             "(index_topk set) and block-sparse ones (index_topk_blocks)")
    if model.block_sparse and wl.padding_mask:  # blocks sit at key slots: padding moves them
        raise ShapecalcError("padding_mask", "block-sparse attention is modelled without "
                             "padding (transformers anchors its blocks to key slots)")
    if model.dsa and wl.mla == "expanded":
        raise ShapecalcError("mla_form", "expanded: the indexer's keys are cached beside the "
                             "latent, which DeepSeek Sparse Attention reads; use absorbed or "
                             "latent")
    if wl.selection == "sparse" and model.mla and wl.mla != "absorbed":
        raise ShapecalcError("selection", f"sparse reads the latents absorbed (FlashMLA), not in "
                             f"the {wl.mla} form")
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
