"""LoRA and QLoRA fine-tuning (`train --lora-rank r --lora-targets …`): the frozen base, the
adapters' parameters, optimizer states, FLOPs and saved activations, as autograd runs peft
(peft 0.21.2, peft/tuners/lora/layer.py, Linear.forward: `result = self.base_layer(x)`;
`x = self._cast_input_dtype(x, lora_A.weight.dtype)`; `result + lora_B(lora_A(dropout(x))) *
scaling`), measured on tiny llama and qwen2 models (tests/torch_reference/measure_lora.py,
tests/data/lora_reference.json).

Targets (`--lora-targets`, peft's module names): q q_proj (attn.q), k k_proj, v v_proj, o
o_proj (attn.out), gate gate_proj (ffn.gate and an MoE's shared expert), up, down; MLA's q_a
q_a_proj, q_b q_b_proj, kv_a kv_a_proj_with_mqa, kv_b kv_b_proj; qkv a fused qkv projection.
Routed experts are not targeted, as peft does not target them: transformers 5 keeps them as fused
3-D tensors, which `target_modules` (nn.Linear modules) does not reach (peft's
`target_parameters` would: not built); gate, up and down adapt the dense FFNs and the shared
expert. A target that matches no linear of the model exits 2.

Counted, per targeted linear [m, d_in] × [d_in, d_out] (m = B·T rows), rank r:
  - trainable parameters r·(d_in + d_out) (lora_A d_in → r, lora_B r → d_out; bias="none");
    `--lora-alpha` sets the scaling α/r, a multiply that changes no shape, count or byte;
  - forward: the base's 2·m·d_in·d_out and the adapters' 2·m·r·(d_in + d_out);
  - backward: no weight gradient for the frozen base (nor the embedding, norms, LM head); its
    input gradient 2·m·d_in·d_out where the input takes one; the adapter's dW_A 2·m·d_in·r, dW_B
    and dX of A·x 2·m·r·d_out each, dX_A 2·m·d_in·r where the input takes one. The first layer's
    input comes from a frozen table, so it takes no gradient: nothing before the first adapter
    is differentiated (with q, v targeted but not k, QKᵀ differentiates q only);
  - saved (train/saved.py with `lora`): a frozen linear keeps no input, a frozen RMSNorm γ no x̂,
    the frozen table no token ids; each adapter keeps its input (in a bf16 model an fp32 copy:
    peft casts it to the adapters' fp32) and A·x [B,T,r]; with lora_dropout > 0 the dropout's
    output and its scaled noise (the CPU kernel's, in the adapter's dtype; CUDA's fused kernel
    keeps a 1-byte mask) instead of the input, the noise only where the input takes a gradient;
    in the first layer nothing before the first adapter is kept;
  - model state: the base at its width (bf16 2 B, fp32 4 B; `--lora-base nf4`: QLoRA's NF4 with
    double quantization, model/quant.py's bnb-nf4 bytes, embedding and LM head left in bf16 as
    bitsandbytes leaves them); the adapters in fp32 (peft's autocast_adapter_dtype: they are the
    master copy) with fp32 gradients and AdamW m, v (fp32, or 8-bit with adam8bit): 16 B (10 B)
    per adapter parameter; ZeRO shards the adapters' terms over dp;
  - `--paged-optimizer` (bitsandbytes' paged AdamW): the optimizer states live in CUDA unified
    memory that the driver pages to CPU RAM under pressure: counted off the GPU (`paged_bytes`).
  QLoRA dequantises each NF4 weight to bf16 before its matmul, forward and for each dX: an
  elementwise pass FlopCounterMode does not count, and one weight's bf16 copy held at a time
  (`dequant_bytes`, the largest base linear's). Gradient checkpointing (recompute torch): the
  first layer as the others (transformers' enable_input_require_grads), activations.py's torch
  rules over the LoRA walk, and `_recompute`. Not built: selective and full recompute, tp, pp,
  cp, ep with LoRA.
  Not measured: MoE layers (their routed experts are counted by the full-training rules, which
  keep each expert's gathered input for its dW: an overcount under a frozen base), LayerNorm
  models (GPT-2's rules), q/k norms.
"""

from __future__ import annotations

from typing import Any

from ..lean import dataclass
from ..model.config import ModelConfig, ShapecalcError, Workload, ceil_div, nbytes
from ..model.stage import Stage

TARGETS: dict[str, tuple[str, ...]] = {
    "q": ("attn.q",), "k": ("attn.k",), "v": ("attn.v",), "o": ("attn.out",),
    "gate": ("ffn.gate", "moe.shared.gate"), "up": ("ffn.up", "moe.shared.up"),
    "down": ("ffn.down", "moe.shared.down"), "q_a": ("attn.q_a",), "q_b": ("attn.q_b",),
    "kv_a": ("attn.kv_a",), "kv_b": ("attn.kv_b",), "qkv": ("attn.qkv",)}
EXPERTS = {"gate": "moe.experts.gate", "up": "moe.experts.up", "down": "moe.experts.down"}
BASES = ("bf16", "nf4")
DEFAULT = ("q", "k", "v", "o", "gate", "up", "down", "q_a", "q_b", "kv_a", "kv_b", "qkv")
# what reads the norm's output (a layer's parallel projections): their input is the layer's
PARALLEL = {"attn.q", "attn.k", "attn.v", "attn.qkv", "attn.q_a", "attn.kv_a", "ffn.gate",
            "ffn.up", "moe.shared.gate", "moe.shared.up"}


@dataclass(frozen=True)
class LoraSpec:
    rank: int
    targets: tuple[str, ...]
    alpha: float
    dropout: float = 0.0
    base: str | None = None  # bf16 | nf4; None: the precision's weight width
    paged: bool = False
    given: bool = True  # --lora-targets given; else DEFAULT's names the model has


def parse_targets(text: str) -> tuple[str, ...]:
    names = tuple(x.strip() for x in text.split(",") if x.strip())
    unknown = [x for x in names if x not in TARGETS]
    if not names or unknown:
        raise ShapecalcError("lora-targets", f"unknown {', '.join(unknown) or repr(text)}; "
                             f"known: {', '.join(TARGETS)}")
    if len(set(names)) != len(names):
        raise ShapecalcError("lora-targets", f"{text!r} names a target twice")
    return names


def targeted(model: ModelConfig, st: list[Stage], spec: LoraSpec) -> list[Stage]:
    """The block linears the targets match; refused: a rank ≤ 0 or over a target's width, a
    target matching no linear, routed experts."""
    if spec.rank < 1:
        raise ShapecalcError("lora-rank", f"must be ≥ 1, not {spec.rank}")
    present = {s.role for s in st if s.group == "block"}
    names = spec.targets if spec.given else tuple(
        t for t in DEFAULT if present.intersection(TARGETS[t]))
    roles = {r: t for t in names for r in TARGETS[t]}
    for t in names:
        if not present.intersection(TARGETS[t]):
            have = [n for n, rs in TARGETS.items() if present.intersection(rs)]
            fused = (" (its routed experts are fused tensors, which peft's target_modules does "
                     "not reach)" if t in EXPERTS and EXPERTS[t] in present else "")
            raise ShapecalcError("lora-targets", f"{t} matches no linear of {model.name}{fused} "
                                 f"(it has: {', '.join(have) or 'none'})")
    out = [s for s in st if s.group == "block" and s.op == "linear" and s.role in roles]
    for s in out:
        d_in, d_out = s.operands[1][0], s.operands[1][1]
        if spec.rank > min(d_in, d_out):
            raise ShapecalcError("lora-rank", f"r={spec.rank} is larger than {s.name}'s width "
                                 f"min(d_in, d_out) = {min(d_in, d_out)}")
    return out


def _io(s: Stage) -> tuple[int, int, int]:
    d_in, d_out = s.operands[1][0], s.operands[1][1]
    return s.flops // (2 * d_in * d_out), d_in, d_out


def trainable(adapters: list[Stage], r: int) -> int:
    return sum(r * (_io(s)[1] + _io(s)[2]) * s.repeat for s in adapters)


def lora_flops(st: list[Stage], adapters: list[Stage], r: int, n_layers: int,
               recompute: str = "none") -> dict[str, int]:
    """Forward, backward and recompute matmul FLOPs of one micro-batch (see the module's doc).
    Block stages are one layer per kind × repeat: the first layer of the first kind is counted
    apart, except under torch's checkpoint (transformers' gradient_checkpointing_enable then
    calls enable_input_require_grads: the embedding's output takes a gradient)."""
    ids = {id(s) for s in adapters}
    kind0 = one_kind(st) if recompute == "none" else -1  # torch: no first layer apart
    fw = sum(s.flops * s.repeat for s in st)
    ad_fw = bw_base = ad_bw = 0
    grad0 = False  # first-layer mode: does the stream take a gradient yet
    at_norm = False
    out_grad: dict[str, bool] = {}
    for s in st:
        if s.group == "embedding" or not s.flops:
            if s.group == "block" and s.kind == kind0 and s.role in ("attn.norm", "ffn.norm"):
                at_norm = grad0
            continue
        first = s.group == "block" and s.kind == kind0
        once = s.repeat // n_layers if first else 0  # the first layer's share of repeat
        rest = s.repeat - once
        needs0 = at_norm if s.role in PARALLEL else grad0
        if s.op == "matmul":  # two activations: an operand's gradient where the other has one
            if s.role == "attn.scores":
                g = [out_grad.get("q", grad0), out_grad.get("k", grad0)]
                out_grad["p"] = any(g)
            else:
                g = [out_grad.get("p", grad0), out_grad.get("v", grad0)]
            bw_base += 2 * s.flops * rest + sum(g) * s.flops * once
            grad0 = grad0 or any(g)
            continue
        m, d_in, d_out = _io(s)
        bw_base += s.flops * rest + (s.flops * once if needs0 else 0)
        own = needs0
        if id(s) in ids:
            a, b = 2 * m * d_in * r, 2 * m * r * d_out
            ad_fw += (a + b) * s.repeat
            ad_bw += (2 * a + 2 * b) * rest + (a + 2 * b + (a if needs0 else 0)) * once
            own = True
        if first:
            if s.role in ("attn.q", "attn.k", "attn.v"):
                out_grad[s.role[-1]] = own
            elif s.role == "attn.qkv":
                out_grad.update(q=own, k=own, v=own)
            grad0 = grad0 or own
    rc = _recompute(st, adapters, r) if recompute == "torch" else 0
    return {"forward_flops": fw + ad_fw, "adapter_forward_flops": ad_fw, "recompute_flops": rc,
            "backward_flops": bw_base + ad_bw, "backward_dx_flops": bw_base + ad_bw,
            "backward_dw_flops": 0, "adapter_backward_flops": ad_bw,
            "base_backward_dx_flops": bw_base}


def _recompute(st: list[Stage], adapters: list[Stage], r: int) -> int:
    """torch's non-reentrant checkpoint re-runs each layer until its last saved tensor is back
    (train/backward.py's torch rule for the base). An op's inputs are saved before its kernel
    runs, so the last saver's kernel is not re-run: the base's down projection in full training;
    with down targeted, its lora_B (which saves A·x last): its base and lora_A are re-run."""
    from .backward import recompute_stages

    rerun = recompute_stages(st, "torch")
    again = {id(s) for s in rerun}
    total = sum(s.flops * s.repeat for s in rerun)
    for s in adapters:
        m, d_in, d_out = _io(s)
        a, b = 2 * m * d_in * r, 2 * m * r * d_out
        total += ((a + b) if id(s) in again else (s.flops + a)) * s.repeat
    return total


def one_kind(st: list[Stage]) -> int | None:
    """The layers' one kind: the first layer is told apart from the others (not built for
    stacks of several kinds)."""
    kinds = {s.kind for s in st if s.group == "block"}
    if len(kinds) > 1:
        raise ShapecalcError("lora-rank", "LoRA without checkpointing is counted on stacks of "
                             "one layer kind (llama, qwen2 and alike) only so far: --recompute "
                             "torch counts every stack (its first layer takes gradients)")
    return next(iter(kinds), None)


class Adapters:
    """train/saved.py's hook: what each adapter keeps; the first layer's deficit after."""

    def __init__(self, adapters: list[Stage], spec: LoraSpec, act: str):
        self.ids = {(s.role, s.kind) for s in adapters}  # the walk builds its own stages
        self.spec = spec
        self.dtype = "fp32" if act in ("bf16", "fp16") else act  # peft's autocast_adapter_dtype
        self.first: int | None = None
        self.first_src = ""
        self.no_grad_masks = 0
        self.w: Any = None

    def adapter(self, w: Any, s: Stage, src: str) -> None:
        if (s.role, s.kind) not in self.ids or s.group != "block":
            return
        self.w = w
        if self.first is None:
            self.first, self.first_src = len(w.out), src
        rows = tuple(zip(s.dims, s.shape, strict=True))[:-1]
        dims = w.storage[src][0] if src in w.storage else (*rows, ("d_in", s.operands[1][0]))
        if self.spec.dropout > 0:
            w.keep(s, "LoRA dropout noise (scaled)", dims, self.dtype)
            if src == self.first_src and w.out[-1].kind == w.out[self.first].kind:
                self.no_grad_masks += w.out[-1].bytes  # its input takes no gradient
            w.keep(s, "LoRA dropout output (lora_A input)", dims, self.dtype)
        elif self.dtype == w.act:
            w.save(s, "lora_A input", src)
        else:
            w.keep(s, f"lora_A input ({self.dtype} copy)", dims, self.dtype)
        w.keep(s, "A·x (lora_B input)", (*rows, ("r", self.spec.rank)), self.dtype)

    def deficit(self, spec: LoraSpec) -> int:
        """Bytes the first layer does not keep that the others do (see the module's doc)."""
        if self.w is None or self.first is None:
            return 0
        out = self.w.out
        start = next(i for i, t in enumerate(out) if t.group == "block")
        kind = out[start].kind
        lost = sum(t.bytes for t in out[start:self.first]) + self.no_grad_masks
        layer = [t for t in out[self.first:] if t.group == "block" and t.kind == kind]
        q, k, v = ("q" in spec.targets, "k" in spec.targets, "v" in spec.targets)
        if q != k and self.first_src and out[self.first].role in PARALLEL:
            drop = "q (bmm" if not k else "k "
            lost += sum(t.bytes for t in layer if t.role == "attn.scores"
                        and t.name.startswith(drop))
        if (q or k) and not v and out[self.first].role in PARALLEL:
            lost += sum(t.bytes for t in layer if t.name == "probabilities (A·V operand)")
        return lost


def base_bytes(model: ModelConfig, wl: Workload, st: list[Stage], base: str, width: str
               ) -> tuple[int, str, int]:
    """(bytes, what, the largest dequantised weight's bf16 bytes) of the frozen base."""
    params = sum(s.params * s.repeat for s in st)
    if base == "nf4":
        from ..model.quant_tensors import weight_sums
        from ..model.quantization import DTYPE_FORMATS

        ws = weight_sums(model, st, DTYPE_FORMATS["nf4"], 1)
        big = max((s.params for s in st if s.op == "linear" and s.role != "head.lm"), default=0)
        return ws.total, ws.label, nbytes(big, "bf16")
    return nbytes(params, width), f"{width} weights", 0


def lora_state(adapter_params: int, base: tuple[int, str, int], precision: str, zero: int,
               dp: int, paged: bool) -> dict[str, Any]:
    """The model-state terms of one rank (see the module's doc)."""
    opt = 2 if precision == "adam8bit" else 8
    # ZeRO-3 (FSDP) shards every parameter, the frozen base's too
    terms: list[dict[str, Any]] = [{"term": "weights", "what": "frozen base: " + base[1],
                                    "bytes_per_param": None, "sharded": zero >= 3,
                                    "params": None,
                                    "bytes": ceil_div(base[0], dp) if zero >= 3 else base[0]}]
    for name, what, per, shard in (
            ("adapter_weights", "LoRA adapters, fp32 (the master copy)", 4, zero >= 3),
            ("gradients", "LoRA adapters' fp32 gradients (the base takes none)", 4, zero >= 2),
            ("optimizer", "AdamW m + v of the adapters only" + (
                " (8-bit)" if opt == 2 else " (fp32)"), opt, zero >= 1)):
        held = ceil_div(adapter_params, dp) if shard else adapter_params
        terms.append({"term": name, "what": what, "bytes_per_param": per, "sharded": shard,
                      "params": held, "bytes": held * per})
    if base[2]:
        terms.append({"term": "dequant", "what": "one NF4 weight dequantised to bf16 for its "
                      "matmul (the largest)", "bytes_per_param": None, "sharded": False,
                      "params": None, "bytes": base[2]})
    paged_bytes = terms[3]["bytes"] if paged else 0
    total = sum(t["bytes"] for t in terms)
    return {"terms": terms, "bytes": total - paged_bytes, "paged_bytes": paged_bytes,
            "bytes_with_paged": total}


def lora_saved(model: ModelConfig, wl: Workload, attention: str, spec: LoraSpec,
               adapters: list[Stage], recompute: str = "none") -> dict[str, Any]:
    """What autograd saves under peft: train/saved.py's walk with the frozen base and the
    adapters' tensors, less what the first layer does not keep (none under torch's checkpoint:
    its input then takes a gradient); recompute none or torch (activations.py's rules)."""
    from .activations import saved_bytes
    from .saved import saved_tensors

    hook = Adapters(adapters, spec, wl.act)
    every = saved_tensors(model, wl, attention, 1, lora=hook)
    out = saved_bytes(model, wl, recompute, attention, every=every)
    lost = hook.deficit(spec) if recompute == "none" else 0
    out.update(resident_bytes=out["resident_bytes"] - lost, peak_bytes=out["peak_bytes"] - lost,
               first_layer_unsaved_bytes=lost, adapter_dtype=hook.dtype)
    return out
