"""What autograd saves for the backward, per forward stage, tensor by tensor (issue 13's exact
activation memory). The one home of these rules; their totals per rank, with recompute, are
train/activations.py's (`saved_bytes`).

Convention ("autograd, transformers eager"): the tensors torch's autograd keeps between a step's
forward and its backward when it runs transformers' modeling code (llama, qwen2, mixtral: the
RMSNorm rules; gpt2: the LayerNorm rules), measured with `saved_tensors_hooks` in
tests/torch_reference/measure_train_saved.py (torch 2.13 CPU kernels, transformers 5.24). A
tensor's storage is counted once, at its size (views of one storage share it); parameters are
listed apart and never counted. Other families are counted by the nearest of these rules
(RMSNorm models as Llama, LayerNorm models as GPT-2): not measured.

What each op keeps (w: the activations' width, from the run's dtype: bf16 for a bf16 model, what
mixed precision runs; fp32 for an fp32 model):
  - embedding: the token ids [B,T] int64 (and GPT-2's position ids [1,T]); RoPE: cos and sin
    [T,Dh] (w), once per forward, read by every layer's q and k products;
  - RMSNorm (Llama's, in fp32): x (the input itself in fp32; in bf16 its fp32 upcast copy), the
    rsqrt [B,T,1] fp32, and the normalised x̂ in w (γ·x̂ keeps it for γ's gradient); a 1+γ
    RMSNorm (Gemma's, Qwen3-Next's, Qwen3.5's: x̂·(1 + γ.float()), then the cast) keeps x̂ in fp32
    and 1 + γ [D] fp32 (measured on Qwen3.5: measure_train_mixers.py);
    LayerNorm (aten.native_layer_norm): x, mean and rstd [B,T,1] (w on the CPU kernel);
  - a linear layer: its input (a view of the producer's storage: counted once) and its weight;
  - eager attention: the q and k of QKᵀ and the v of A·V as [B,H,T,Dh] (bmm operands: GQA's
    repeated K and V, otherwise contiguous copies), the softmax output [B,H,T,T] (Llama: in fp32,
    and its cast to w for A·V when w is not fp32; GPT-2: in w), the merged heads [B,T,H·Dh] for
    WO. The scale and the mask save nothing; dropout is off (p = 0: no mask kept);
  - flash attention (SDPA's flash kernel, FlashAttention): q, k and v as they reach it (k and v
    with H_kv heads, no repeat; GPT-2's three are views of the fused qkv output), the output
    [B,H,T,Dh] (also WO's input: no copy) and the logsumexp [B,H,T] fp32: no [T,T] tensor;
  - SwiGLU: the gate and up outputs, SiLU's output, their product (for the down projection): four
    [B,T,Dff]; GPT-2's gelu_new (0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))): x, the tanh, 1 + tanh
    and 0.5·x, then the activation for the down projection: five [B,T,Dff];
  - Mixtral's router: the fp32 softmax [B,T,E], the top-k indices [B,T,k] int64, values [B,T,k]
    and their sum [B,T,1] (fp32, the renormalising division); its eager experts loop, per
    (token, expert) pair: 2 int64 indices, the gathered input [D], the fused gate-up output
    [2·Dff_e], SiLU's output and the product [Dff_e], the routing weight (fp32), the expert's
    output [D] and its weighted copy [D];
  - the loss: the fp32 log-softmax [B·T, N_vocab], the targets [B·T] int64 and a 4-byte weight.

Recompute (what stays between forward and backward):
  - none: all of it;
  - selective (Korthikanti et al. 2022): the attention core's [T,T] tensors are recomputed from q
    and k (kept anyway): eager drops the softmax outputs; flash keeps none to drop;
  - full (Megatron): each layer keeps only its input [B,T,D]; outside the layers, all as none;
  - torch (transformers' gradient_checkpointing_enable(): torch.utils.checkpoint, non-reentrant,
    per decoder layer): full's tensors, and what the checkpoint's closure holds, the layers'
    keyword arguments: the eager [B,1,T,T] mask (Llama; GPT-2 passes it as an argument: saved),
    RoPE's cos and sin, the position ids.
Resident: the bytes kept when the forward ends. Peak (with recompute): a layer's backward first
recomputes, so it also holds that layer's saved tensors; by then the head's and the loss's are
freed, and the inputs of the layers still to go back through are held: the peak is the most of
resident and, over the layers i, (outside the layers, less the head) + Σ_{j≤i} inputs_j + the
layer's recomputed tensors (selective: + one layer's [T,T] tensors). Memory fits read the peak.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from ..interpret.mixer_rules import Saves, mixer_saved
from ..interpret.symbolic import stages as symbolic_stages
from ..model.config import ModelConfig, ShapecalcError, Workload, ceil_div, nbytes
from ..model.expr import Dim, formula
from ..model.stage import Stage

CONVENTION = "autograd, transformers eager"
MEASURED = ("llama", "qwen2", "mixtral", "gpt2")
ATTENTION = ("eager", "flash")
# norms of the residual stream (their input is the stream, their output what the next linears
# read), and the linear layers that read it
STREAM_NORMS = ("attn.norm", "ffn.norm", "head.norm", "embed.norm", "mixer.norm")
READS_NORM = ("attn.q", "attn.k", "attn.v", "attn.qkv", "attn.q_a", "attn.kv_a", "ffn.gate",
              "ffn.up", "moe.router", "moe.shared.gate", "moe.shared.up", "moe.shared_gate",
              "ssm.in", "gdn.qkv", "gdn.z", "gdn.b", "gdn.a", "gdn.qkvz", "gdn.ba", "attn.gate")
# a q/k norm after the projections (Qwen3, Gemma 3, Qwen3.5) reads its projection's output
HEAD_NORM_READS = {"attn.q_norm": "attn.q", "attn.k_norm": "attn.k"}
# the attention core's stages, replaced by one kernel under flash
FLASH_CORE = ("attn.repeat_kv", "attn.kT", "attn.scores", "attn.scale", "attn.softcap",
              "attn.alibi", "attn.mask", "attn.softmax")

Dims = tuple[tuple[str, int], ...]


class Saved(NamedTuple):
    """One tensor autograd keeps, in one occurrence of its stage (× repeat per forward)."""

    stage: str
    role: str
    group: str
    kind: int | None
    repeat: int
    name: str
    dims: list[str]
    shape: list[int]
    dtype: str
    elements: int
    formula: str  # the element count in the seeds' symbols
    storage_bytes: int
    bytes: int  # what it adds: 0 when it shares a storage counted before, or is a parameter
    shares: str  # the tensor whose storage it is a view of ("" if its own)
    param: bool
    core: bool  # the attention core's [T,T] tensors: what selective recompute drops
    layer_input: bool  # the layer's input (kept anyway under full/torch recompute)

    def as_dict(self) -> dict[str, Any]:
        return self._asdict()


def tensor_bytes(dtype: str, elements: int) -> int:
    if dtype == "bool":  # a mixer's masks
        return elements
    return elements * 8 if dtype == "int64" else nbytes(elements, dtype)


class _Walk:
    """Walks the forward's stages, keeping for each live tensor its storage (a key) and whether
    that storage is already counted."""

    def __init__(self, model: ModelConfig, wl: Workload, attention: str, tp: int,
                 lora: Any = None):
        self.m, self.wl, self.flash, self.tp = model, wl, attention == "flash", tp
        self.lora = lora  # LoRA's frozen base (train/lora.py): its linears' inputs go unsaved
        self.act = wl.act
        self.llama = model.norm == "rmsnorm"  # the flavour of transformers' code (see doc)
        self.out: list[Saved] = []
        self.storage: dict[str, tuple[Dims, str, str]] = {}  # key → (dims, dtype, its name)
        self.counted: set[str] = set()
        self.n = 0
        self.layer_in = ""

    def new(self, dims: Dims, dtype: str, name: str, replicated: bool = False) -> str:
        if self.tp > 1 and not replicated and not any("/p" in sym for sym, _ in dims):
            # sequence parallelism: outside the tensor-parallel region a rank keeps its share of
            # the tokens (⌈T/p⌉); inside, the rank's stages already hold H/p, Dff/p, N_vocab/p
            dims = tuple(("T/p", ceil_div(v, self.tp)) if sym == "T" else (sym, v)
                         for sym, v in dims)
        self.n += 1
        key = f"t{self.n}"
        self.storage[key] = (dims, dtype, name)
        return key

    def save(self, s: Stage, name: str, key: str, core: bool = False) -> None:
        if key not in self.storage:  # a producer these rules do not follow: its own tensor
            key = self.new(_dims(s), self.act, name)
        dims, dtype, own = self.storage[key]
        n, f = formula(dim_factors(dims))
        size = tensor_bytes(dtype, n)
        shared = key in self.counted
        self.counted.add(key)
        self.out.append(Saved(s.name, s.role, s.group, s.kind, s.repeat, name,
                              [d for d, _ in dims], [v for _, v in dims], dtype, n, f, size,
                              0 if shared else size, own if shared else "", False, core,
                              key == self.layer_in))

    def keep(self, s: Stage, name: str, dims: Dims, dtype: str, core: bool = False,
             replicated: bool = False) -> str:
        key = self.new(dims, dtype, name, replicated)
        self.save(s, name, key, core)
        return key

    def param(self, s: Stage, name: str, dims: Dims) -> None:
        n, f = formula(dim_factors(dims))
        size = nbytes(n, self.wl.dtype)
        self.out.append(Saved(s.name, s.role, s.group, s.kind, s.repeat, name,
                              [d for d, _ in dims], [v for _, v in dims], self.wl.dtype, n,
                              f, size, 0, "", True, False, False))


def dim_factors(dims: Dims) -> list[Dim]:
    """A tensor's dims as factors: named ones by their symbol, literal ones (1, 2) as numbers."""
    return [Dim.const(v) if sym.isdigit() else Dim.of(sym, v) for sym, v in dims]


def _dims(s: Stage) -> Dims:
    return tuple(zip(s.dims, s.shape, strict=True))


def _row(d: Dims) -> Dims:
    """[…, 1]: a per-row statistic."""
    return (*d[:-1], ("1", 1))


def saved_tensors(model: ModelConfig, wl: Workload, attention: str = "eager", tp: int = 1,
                  lora: Any = None) -> list[Saved]:
    """Every tensor autograd keeps for the backward (no recompute), stage by stage: each block
    stage once per layer kind (× repeat: its layers), then the loss. With tp > 1, one rank's
    (Megatron's tensor parallelism with sequence parallelism; see the module's doc)."""
    if attention not in ATTENTION:
        raise ShapecalcError("attention", f"unknown {attention!r}; known: {', '.join(ATTENTION)}")
    st = symbolic_stages(model, wl.model_copy(update={"tp": tp}), tp)
    w = _Walk(model, wl, attention, tp, lora)
    rope = any(s.op == "rope" for s in st)
    x = h = last = ""  # keys: the residual stream, the last norm's output, the last output
    qkv: dict[str, str] = {}
    act, lin, gate, up, prev = w.act, "", "", "", None
    stores: dict[str, str] = {}  # a mixer layer's storages by name (its projections' by role)
    for i, s in enumerate(st):
        d, r = _dims(s), s.role
        if s.group == "block" and (prev is None or (prev.group, prev.kind) != ("block", s.kind)):
            w.layer_in = x  # a layer (one of each kind) starts: its input is the stream
        prev = s
        if (mix := mixer_saved(s, st, i, act)) is not None:  # a token mixer's stage: its rule
            last = _mixer(w, s, mix, stores) or last
        elif r == "input.ids":
            ids = d
        elif s.op == "embed":
            if lora is None:  # a frozen table takes no gradient: the ids go unsaved
                w.keep(s, "token ids", ids, "int64", replicated=True)
            w.param(s, "embedding table", (("N_vocab", model.vocab_size), ("D", model.d_model)))
            x = h = last = w.new(d, act, "embedding output")
        elif r == "pos.add":
            if model.positions == "learned":
                w.keep(s, "position ids", (("1", 1), ids[1]), "int64", replicated=True)
            x = h = last = w.new(d, act, "embeddings + positions")
        elif r == "rope.angles":
            if rope:
                cs = (d[0], ("Dh", model.dh) if model.rot == model.dh else ("R", model.rot))
                w.keep(s, "cos", cs, act, replicated=True)
                w.keep(s, "sin", cs, act, replicated=True)
        elif s.op in ("rmsnorm", "layernorm", "l2norm"):  # q/k norms read their projection's
            src = x if r in STREAM_NORMS else stores.get(HEAD_NORM_READS.get(r, ""), last)
            last = _norm(w, s, src, d)
            if r in ("attn.q_norm", "attn.k_norm", "attn.q_l2norm", "attn.k_l2norm"):
                qkv[r[5]] = last
            elif r in STREAM_NORMS:
                h = last
        elif s.op == "linear" and not r.startswith("moe.experts"):
            if lora is None:
                w.save(s, "input", h if r in READS_NORM else last)
            else:  # frozen: no dW, so no input kept; an adapter keeps its own
                lora.adapter(w, s, h if r in READS_NORM else last)
            w.param(s, "weight", (("d_in", s.operands[1][0]), ("d_out", s.operands[1][1])))
            wide = (*d[:-1], (f"2·{d[-1][0]}", 2 * d[-1][1]))  # q_proj: q and the gate
            last = lin = stores[r] = (
                stores["attn.q"] if r == "attn.gate"  # q_proj's second half (one projection)
                else w.new(wide if r == "attn.q" and model.attn_output_gate else d, act,
                           f"{s.name} output"))
            if r in ("attn.q", "attn.k", "attn.v"):
                qkv[r[-1]] = last
            elif r == "attn.qkv":
                qkv.update(q=last, k=last, v=last)
            elif r == "attn.kv_b":  # MLA: k_nope and v are views of its output
                qkv["v"] = last
            elif r in ("ffn.gate", "moe.shared.gate"):
                gate = last
            elif r in ("ffn.up", "moe.shared.up"):
                up = last
        elif s.op == "concat":  # torch.cat: a new tensor, saves nothing
            last = w.new(d, act, s.name)
            if r in ("attn.q.concat", "attn.k.concat"):
                qkv[r[5]] = last
        elif s.op == "softcap":  # c·tanh(x/c): tanh keeps its output
            last = w.keep(s, "tanh output", d, act, core=r == "attn.softcap")
        elif r in ("attn.q.heads", "attn.k.heads", "attn.v.heads"):
            pass  # views: q, k, v keep their storage
        elif r == "attn.rope":
            which = "k" if "k" in s.name.split()[-1] else "q"
            qkv[which] = w.new(d, act, f"{which} after RoPE")
        elif r == "attn.repeat_kv" and not w.flash:
            which = "k" if "k" in s.name.split()[-1] else "v"
            qkv[which + "_rep"] = w.new(d, act, f"{which} repeated to H heads")
        elif w.flash and r in FLASH_CORE:
            pass
        elif r == "attn.values" and w.flash:
            _flash(w, s, qkv, d)
            last = qkv["o"]
        elif r == "attn.scores":
            w.keep(s, "q (bmm operand, contiguous copy)", _operand(s, 0), act)
            if "k_rep" in qkv:
                w.save(s, "k repeated (bmm operand)", qkv["k_rep"])
            else:
                w.keep(s, "k (bmm operand, contiguous copy)", _operand(s, 0), act)
        elif r == "attn.softmax" and not w.flash:
            if w.llama:  # softmax(dtype=float32), then .to(w)
                p = w.keep(s, "softmax output (fp32)", d, "fp32", core=True)
                if act != "fp32":
                    p = w.new(d, act, "probabilities")
                    w.save(s, "probabilities (cast for A·V)", p, core=True)
            else:
                p = w.keep(s, "softmax output", d, act, core=True)
            qkv["p"] = p
        elif r == "attn.values":
            w.save(s, "probabilities (A·V operand)", qkv["p"], core=True)
            if "v_rep" in qkv:
                w.save(s, "v repeated (bmm operand)", qkv["v_rep"])
            else:
                w.keep(s, "v (bmm operand, contiguous copy)", _operand(s, 1), act)
            qkv["o"] = last = w.new(d, act, "A·V output")
        elif r == "attn.merge":
            if s.op == "transpose" and not w.flash:  # .transpose(1, 2).contiguous(): a copy
                last = stores[r] = w.new(d, act, "merged heads")
        elif r == "residual":  # the stream: what an un-normed branch (OLMo 2) reads next
            x = h = last = w.new(d, act, "residual stream")
            qkv, stores = {}, {}
        elif r == "attn.gate.mul":  # o ⊙ sigmoid(gate): both operands
            w.save(s, "o (merged heads)", stores.get("attn.merge", qkv.get("o", last)))
            w.save(s, "sigmoid(gate)", last)
            last = w.new(d, act, "o ⊙ gate")
        elif r in ("ffn.act", "moe.shared.act", "moe.shared_gate.act", "attn.gate.act"):
            src = gate if model.gated else lin
            last = _activation(w, s, src, d)
        elif r in ("ffn.mul", "moe.shared.mul"):
            w.save(s, "activation output", last)
            w.save(s, "up output", up)
            last = w.new(d, act, "gate ⊙ up")
        elif r == "moe.route":
            _route(w, s, d)
        elif r.startswith("moe.experts"):
            last = _experts(w, s, d, last)
        elif r in ("block.sum", "moe.add_shared", "moe.combine"):
            last = w.new(d, act, s.name)
    _loss(w, ids, next(_dims(s)[-1] for s in st if s.role == "head.lm"))
    return w.out


def _mixer(w: _Walk, s: Stage, mix: Saves, stores: dict[str, str]) -> str | None:
    """A mixer stage's saved tensors (its rule's, interpret/vjp_*.py), each a view of a named
    storage of the layer or its own; the key of the stage's output storage, if it names one."""
    for k in mix.keeps:
        key = stores.get(k.store) if k.store else None
        if key is None:
            key = w.new(k.dims, k.dtype, k.name)
            if k.store:
                stores[k.store] = key
        w.save(s, k.name, key)
    out = mix.out
    if out is None:
        return None
    if out.store and out.store in stores:
        return stores[out.store]
    key = w.new(out.dims, out.dtype, f"{s.name} output")
    if out.store:
        stores[out.store] = key
    return key


def _operand(s: Stage, i: int) -> Dims:
    """A matmul's operand i as it reaches the bmm: QKᵀ's q [B,H,T,Dh], A·V's v [B,H,T,Dh]."""
    return tuple(zip(s.operand_dims[i], s.operands[i], strict=True))


def _norm(w: _Walk, s: Stage, src: str, d: Dims) -> str:
    fp32 = w.act == "fp32"
    if s.op == "layernorm":  # aten.native_layer_norm: x, mean, rstd (the CPU kernel's dtype)
        w.save(s, "x", src)
        w.keep(s, "mean", _row(d), w.act)
        w.keep(s, "rstd", _row(d), w.act)
        w.param(s, "γ", (d[-1],))
    else:  # x.to(fp32); x·rsqrt(mean(x²) + ε); γ·x̂.to(w)
        if fp32:
            w.save(s, "x", src)
        else:
            w.keep(s, "x (fp32 copy)", d, "fp32")
        w.keep(s, "rsqrt", _row(d), "fp32")
        if s.op == "rmsnorm" and w.m.norm_plus_one:  # x̂·(1 + γ.float()), then cast: in fp32
            w.keep(s, "1 + γ (fp32)", (d[-1],), "fp32", replicated=True)
            if w.lora is None:
                w.keep(s, "x̂ (normalised, fp32)", d, "fp32")
            w.param(s, "γ", (d[-1],))
        elif s.op == "rmsnorm" and w.lora is None:  # a frozen γ needs no x̂
            w.keep(s, "x̂ (normalised)", d, w.act)
            w.param(s, "γ", (d[-1],))
    return w.new(d, w.act, f"{s.name} output")


def _activation(w: _Walk, s: Stage, src: str, d: Dims) -> str:
    if s.op == "gelu" and not w.llama:  # gelu_new: pow, tanh, 1 + tanh, 0.5·x, their product
        w.save(s, "x", src)
        for name in ("tanh(…)", "1 + tanh(…)", "0.5·x"):
            w.keep(s, name, d, w.act)
    elif s.op in ("relu", "sigmoid"):  # the backward reads the output
        out = w.new(d, w.act, f"{s.name} output")
        w.save(s, "output", out)
        return out
    else:  # silu, gelu (erf or tanh kernels): the input
        w.save(s, "x", src)
    return w.new(d, w.act, f"{s.name} output")


def _flash(w: _Walk, s: Stage, qkv: dict[str, str], d: Dims) -> None:
    for which in "qkv":
        w.save(s, which, qkv.get(which) or w.new(d, w.act, which))
    qkv["o"] = w.keep(s, "output", d, w.act)
    w.keep(s, "logsumexp", d[:-1], "fp32")


def _route(w: _Walk, s: Stage, d: Dims) -> None:
    rows = d[:-1]
    E = ("E", w.m.n_experts or 0)
    w.keep(s, "router probabilities (fp32 softmax)", (*rows, E), "fp32")
    w.keep(s, "top-k indices", d, "int64")
    if w.m.norm_topk_prob:
        w.keep(s, "top-k values", d, "fp32")
        w.keep(s, "top-k sum", _row(d), "fp32")


def _experts(w: _Walk, s: Stage, d: Dims, last: str) -> str:
    """Mixtral's eager experts loop: per (token, expert) pair, each expert on its own rows."""
    pairs, r, act = d[:-1], s.role, w.act
    D = ("D", w.m.d_model)
    if r == "moe.experts.gate":
        w.keep(s, "token and slot indices", (*pairs, ("2", 2)), "int64")
        w.keep(s, "gathered input", (*pairs, D), act)
        w.keep(s, "gate-up output (fused)", (*pairs, ("2", 2), d[-1]), act)
        w.param(s, "expert gate-up weights", (("E", w.m.n_experts or 0), ("2", 2), d[-1], D))
    elif r == "moe.experts.act":
        w.keep(s, "SiLU output", d, act)
    elif r == "moe.experts.mul":
        return w.keep(s, "gate ⊙ up", d, act)
    elif r == "moe.experts.down":
        w.keep(s, "routing weight", (*pairs, ("1", 1)), "fp32")
        w.keep(s, "expert output", d, act)
        w.keep(s, "weighted output", d, act)
        w.param(s, "expert down weights", (("E", w.m.n_experts or 0), D,
                                            (s.operand_dims[0][-1], s.operands[0][-1])))
    elif r == "moe.experts.up" and not w.m.gated:
        w.keep(s, "gathered input", (*pairs, D), act)
        w.keep(s, "up output", d, act)
    return last


def _loss(w: _Walk, ids: Dims, V: tuple[str, int]) -> None:
    """transformers' ForCausalLMLoss: logits.float(), cross-entropy over all B·T positions (with
    tp > 1, Megatron's vocabulary-parallel cross-entropy: each rank its N_vocab/p columns)."""
    s = Stage(name="loss (cross-entropy)", op="loss", group="head", dims=[], shape=[],
              role="loss")
    w.keep(s, "log-probabilities (fp32)", (*ids, V), "fp32")
    if ids[0][1] == 1:  # labels padded to T+1 then shifted: one row's slice is contiguous, so
        # .contiguous() keeps the padded storage
        w.keep(s, "targets (a view of the padded labels)", (ids[0], ("(T+1)", ids[1][1] + 1)),
               "int64", replicated=True)
    else:
        w.keep(s, "targets", ids, "int64", replicated=True)
    w.keep(s, "total weight", (), "fp32", replicated=True)
