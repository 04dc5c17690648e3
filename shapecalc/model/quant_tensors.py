"""A model's weights as a quantized checkpoint stores them, tensor by tensor, from its stages.

Trace, closed form, planning and serving take their weight bytes from `weight_sums` when the
weights have a format (quantization.py: the byte formulas), and stay `params × bits` for a plain
dtype (fp32 … int4). What a format leaves unquantized stays at its width: embeddings, routers,
norms, biases, the LM head (unless gptq's lm_head), and the modules `keep` names.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .config import ModelConfig
from .errors import ShapecalcError
from .parallel import ep_rank_expert_params, pp_layers
from .plan import layer_plan
from .quantization import Piece, Quantization, label, nbytes, pieces
from .stage import EXPERT_ROLES, Stage

# where each role's weight sits in a Hugging Face checkpoint, below model.layers.{i}. (the
# names `keep` patterns are matched against; the first names a tensor row; then aliases: the
# fused experts module of transformers 5, gpt-oss's gate_up_proj, Mixtral's router)
LAYER_NAMES: dict[str, tuple[str, ...]] = {
    "attn.q": ("self_attn.q_proj",), "attn.k": ("self_attn.k_proj",),
    "attn.v": ("self_attn.v_proj",), "attn.qkv": ("self_attn.qkv_proj",),
    "attn.out": ("self_attn.o_proj",), "attn.q_a": ("self_attn.q_a_proj",),
    "attn.q_b": ("self_attn.q_b_proj",), "attn.kv_a": ("self_attn.kv_a_proj_with_mqa",),
    "attn.kv_b": ("self_attn.kv_b_proj",),
    "ffn.gate": ("mlp.gate_proj",), "ffn.up": ("mlp.up_proj",), "ffn.down": ("mlp.down_proj",),
    "moe.router": ("mlp.gate", "mlp.router", "block_sparse_moe.gate"),
    "moe.experts.gate": ("mlp.experts.gate_proj", "mlp.experts.gate_up_proj", "mlp.experts"),
    "moe.experts.up": ("mlp.experts.up_proj", "mlp.experts.gate_up_proj", "mlp.experts"),
    "moe.experts.down": ("mlp.experts.down_proj", "mlp.experts"),
    "moe.shared.gate": ("mlp.shared_experts.gate_proj", "mlp.shared_expert.gate_proj"),
    "moe.shared.up": ("mlp.shared_experts.up_proj", "mlp.shared_expert.up_proj"),
    "moe.shared.down": ("mlp.shared_experts.down_proj", "mlp.shared_expert.down_proj"),
    "moe.shared_gate": ("mlp.shared_expert_gate",),
    "attn.norm": ("input_layernorm",), "ffn.norm": ("post_attention_layernorm",),
    "attn.q_norm": ("self_attn.q_norm",), "attn.k_norm": ("self_attn.k_norm",),
    "attn.q_a_norm": ("self_attn.q_a_layernorm",), "attn.kv_a_norm": ("self_attn.kv_a_layernorm",),
    "attn.softmax": ("self_attn.sinks",), "attn.post_norm": ("post_attention_layernorm",),
    "ffn.post_norm": ("post_feedforward_layernorm",),
}
TOP_NAMES = {"embed": ("model.embed_tokens",), "head.lm": ("lm_head",),
             "head.norm": ("model.norm",), "pos.add": ("model.embed_positions",),
             "embed.norm": ("model.embed_layernorm",)}
# modules of a multimodal checkpoint that shapecalc does not count (the vision tower): a keep
# pattern may name them
OUTSIDE = re.compile(r"^(model\.)?(vision|visual|multi_modal_projector|audio|mm_projector)")
KV_SCALES = {"attn.k": ("k",), "attn.v": ("v",), "attn.qkv": ("k", "v")}  # modelopt's
NEVER = ("moe.router", "moe.shared_gate")  # kept at width by every format here (see README)
BARE = ("attn.softmax",)  # parameters that are a module attribute, not a module's .weight
KEEP_KEY = "quantization.keep (modules_to_not_convert / ignore)"


@dataclass(frozen=True)
class Tensor:
    """One stored tensor of the checkpoint (`count` of them: layers, and a stage's repeats)."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    part: str  # data | scales | zeros | other | unquantized
    count: int

    @property
    def bytes(self) -> int:
        return nbytes(self.shape, self.dtype) * self.count

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype,
                "part": self.part, "count": self.count, "bytes": self.bytes}


@dataclass(frozen=True)
class WeightSums:
    """The weight bytes of one rank's stages: each layer's (and of those its routed experts'),
    the embedding group's (of which the token table's) and the head group's."""

    layers: tuple[int, ...]
    experts: tuple[int, ...]
    embedding: int
    head: int
    table: int
    tensors: tuple[Tensor, ...]
    label: str  # the format, named (totals.weight_format)

    @property
    def total(self) -> int:
        return sum(self.layers) + self.embedding + self.head

    @property
    def expert_total(self) -> int:
        return sum(self.experts)

    def parts(self) -> dict[str, int]:
        out = dict.fromkeys(("data", "scales", "zeros", "other", "unquantized"), 0)
        for t in self.tensors:
            out[t.part] += t.bytes
        return out



# ── module names, and what keep leaves unquantized ─────────────────────────────────────────────


def _matches(pattern: re.Pattern[str], key: str, name: str) -> bool:
    """transformers' should_convert_module: from the start to a module boundary (as a regex),
    or as a suffix."""
    return bool(pattern.match(name)) or name.endswith(key)


def _compiled(q: Quantization) -> list[tuple[str, re.Pattern[str]]]:
    out = []
    for key in q.keep:
        try:
            out.append((key, re.compile(rf"(?:{key})(?:(?<=\.)|(?=\.|$))")))
        except re.error as e:
            raise ShapecalcError(KEEP_KEY, f"{key!r} is not a pattern transformers can match "
                                 f"({e})") from None
    return out


def _names(role: str, layer: int | None) -> tuple[str, ...]:
    if layer is None:
        return TOP_NAMES.get(role, (role,))
    return tuple(f"model.layers.{layer}.{t}" for t in LAYER_NAMES.get(role, (role,)))


def _eligible(q: Quantization, s: Stage) -> bool:
    """A matrix the format quantizes, unless `keep` names it."""
    if s.op != "linear" or s.role in NEVER:
        return False
    return s.role != "head.lm" or (q.format == "gptq" and q.lm_head)


# ── the tensors ────────────────────────────────────────────────────────────────────────────────


def _stage_pieces(q: Quantization, s: Stage, quantized: bool, strict: bool) -> list[Piece]:
    """The stored tensors of one stage's parameters (`strict`: a whole matrix, see pieces)."""
    wide = q.wide
    if s.op == "linear" and len(s.operands) > 1:
        w = tuple(s.operands[1])
        experts = w[0] if len(w) == 3 else None
        k, n = w[-2], w[-1]
        numel = k * n * (experts or 1)
        e = () if experts is None else (experts,)
        out: list[Piece] = pieces(q, s.name, n, k, experts, strict) if quantized else [
            ("weight", (*e, n, k), wide, "unquantized")]
        if quantized and q.kv_scales and s.role in KV_SCALES:  # the fp8 cache's scales
            out += [(f"{c}_scale", (), "fp32", "scales") for c in KV_SCALES[s.role]]
        bias = s.params - numel
        if bias:
            shape = (*e, bias // (experts or 1)) if bias % (experts or 1) == 0 else (bias,)
            out.append(("bias", shape, wide, "unquantized"))
        return out
    if s.op == "embed" and s.params % s.shape[-1] == 0:
        return [("weight", (s.params // s.shape[-1], s.shape[-1]), wide, "unquantized")]
    return [("weight", (s.params,), wide, "unquantized")]


def _joined(module: str, role: str, suffix: str) -> str:
    """A tensor's name: the module's, then the piece's (the sinks are a parameter itself)."""
    return module if role in BARE and suffix == "weight" else f"{module}.{suffix}"


def _runs(layers: Iterable[int]) -> str:
    """0,1,2,5 → 0-2,5 (the layers a tensor row stands for)."""
    out: list[str] = []
    xs = sorted(layers)
    i = 0
    while i < len(xs):
        j = i
        while j + 1 < len(xs) and xs[j + 1] == xs[j] + 1:
            j += 1
        out.append(str(xs[i]) if i == j else f"{xs[i]}-{xs[j]}")
        i = j + 1
    return ",".join(out)


def weight_sums(model: ModelConfig, stages: list[Stage], q: Quantization, p: int = 1
                ) -> WeightSums:
    """One rank's weight bytes under format `q`, from its stages at tensor-parallel degree `p`
    (a prefill stage list: the weights as the checkpoint holds them, MLA's kv_b whole): per
    layer, per group, and the tensors by name. A `keep` pattern that names no module, or (the
    whole model, p = 1) a block or group that does not fit its matrix, is refused."""
    plan = layer_plan(model)
    n = model.n_layers
    of_kind: dict[int, list[int]] = {}
    for i, k in enumerate(plan.kind_of):
        of_kind.setdefault(k, []).append(i)
    pats = _compiled(q)
    used: set[str] = set()

    def kept(role: str, layer: int | None) -> bool:
        hit = False
        for name in _names(role, layer):
            for key, p in pats:
                if _matches(p, key, name):
                    used.add(key)
                    hit = True
        return hit

    layer_b, expert_b = [0] * n, [0] * n
    emb = head = table = 0
    first: list[Tensor] = []  # the embedding group's tensors, then the layers', then the head's
    last: list[Tensor] = []
    # rows of the layers' tensors: (name below the layer, shape, dtype, part) → layer → count
    per: dict[tuple[str, tuple[int, ...], str, str], dict[int, int]] = {}
    for s in stages:
        if not s.params:
            continue
        if s.kind is None:
            named = kept(s.role, None)  # always asked: it records which patterns name a module
            quantized = _eligible(q, s) and not named
            b = 0
            for suffix, shape, dt, part in _stage_pieces(q, s, quantized, p == 1):
                t = Tensor(_joined(_names(s.role, None)[0], s.role, suffix), shape, dt, part,
                           s.repeat)
                (first if s.group == "embedding" else last).append(t)
                b += t.bytes
            if s.group == "embedding":
                emb += b
                table += b if s.role == "embed" else 0
            else:
                head += b
            continue
        layers = of_kind[s.kind]
        each = s.repeat // len(layers)  # a stage recorded once per layer of its kind
        split: dict[bool, list[int]] = {}
        for i in layers:
            named = kept(s.role, i)
            split.setdefault(_eligible(q, s) and not named, []).append(i)
        for quantized, group in split.items():
            b = 0
            for suffix, shape, dt, part in _stage_pieces(q, s, quantized, p == 1):
                tail = _joined(LAYER_NAMES.get(s.role, (s.role,))[0], s.role, suffix)
                at = per.setdefault((tail, shape, dt, part), {})
                for i in group:
                    at[i] = at.get(i, 0) + each
                b += nbytes(shape, dt) * each
            for i in group:
                layer_b[i] += b
                if s.role in EXPERT_ROLES:
                    expert_b[i] += b
    rows = first + [Tensor(f"model.layers.{_runs(at)}.{tail}", shape, dt, part,
                           sum(at.values())) for (tail, shape, dt, part), at in per.items()] + last
    for key, _ in pats:
        if key not in used and not OUTSIDE.match(key):
            raise ShapecalcError(KEEP_KEY, f"{key!r} names no module of {model.name} (its "
                                 "modules: model.embed_tokens, model.layers.N.self_attn.q_proj, "
                                 "…mlp.experts, lm_head, as transformers names them)")
    return WeightSums(tuple(layer_b), tuple(expert_b), emb, head, table, tuple(rows), label(q))


def stage_weight_bytes(model: ModelConfig, rank: WeightSums, full: WeightSums, s: int,
                       ep: int = 1) -> list[int]:
    """One rank's weight bytes on each of s pipeline stages, placed as parallel.stage_params
    places parameters: its layers, the embedding group first, the head group last (with tied
    embeddings and s > 1 the last stage's own copy of the table); with ep > 1 the routed
    experts are E/ep whole experts a GPU, not each expert's tp slice."""
    per_layer = list(rank.layers)
    if ep > 1:
        per_layer = [b - r + ep_rank_expert_params(r, f, ep) for b, r, f in
                     zip(per_layer, rank.experts, full.experts, strict=True)]
    out, start = [], 0
    for k in pp_layers(model.n_layers, s):
        out.append(sum(per_layer[start : start + k]))
        start += k
    out[0] += rank.embedding
    out[-1] += rank.head + (rank.table if model.tie_embeddings and s > 1 else 0)
    return out
