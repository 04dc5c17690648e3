"""A stage: one step of the forward pass, what it produces and what it costs; and the roles that
say what a stage is, whatever its printed name."""

from __future__ import annotations

from typing import Any, Literal

from .expr import Expr

Group = Literal["embedding", "block", "head", "mtp"]
Split = Literal["column", "row", "vocab", "replicated"]
SPLIT_NOTE = {"column": "column-parallel", "row": "row-parallel", "vocab": "vocab-parallel",
              "replicated": ""}  # what a stage's note says of its split

# Stage roles: what a stage IS, whatever its printed name. Breakdowns, FlashAttention's skips,
# verify's matching and the ledgers key on roles; names are display text only.
ATTN_PROJ_ROLES = ("attn.q", "attn.k", "attn.v", "attn.qkv", "attn.out", "attn.gate",
                   "attn.head_gate", "attn.kv", "attn.o_a", "attn.o_b")  # DeepSeek-V4's K=V, output
# DeepSeek-V4's compressors and the csa indexer (their projections, pools, norms, scores)
COMPRESSOR_PREFIXES = ("attn.hca.", "attn.csa.", "attn.idx.")
ATTN_SCORE_ROLES = ("attn.scores", "attn.values")  # QKᵀ and A·V
EXPERT_ROLES = ("moe.experts.gate", "moe.experts.up", "moe.experts.down")  # E experts' matrices
FFN_ROLES = ("ffn.gate", "ffn.up", "ffn.down", "moe.router", "moe.route", *EXPERT_ROLES,
             "moe.shared.gate",
             "moe.shared.up", "moe.shared.down", "moe.shared_gate")
NORM_ROLES = ("attn.norm", "ffn.norm", "head.norm", "attn.q_norm", "attn.k_norm",
              "attn.q_l2norm", "attn.k_l2norm", "attn.post_norm", "ffn.post_norm", "mixer.norm",
              "mixer.post_norm")
# the stateful token mixers' stages (Mamba-2, gated DeltaNet, short conv, Mamba-1, KDA, CCA)
MIXER_PREFIXES = ("ssm.", "gdn.", "conv.", "mamba.", "kda.", "cca.")


def is_mixer(role: str) -> bool:
    return role.startswith(MIXER_PREFIXES)
KV_ROLES = ("kv.write", "kv.append", "kv.read")
# what FlashAttention never materialises: the [B,H,Tq,Tk] scores and what acts on them, and the
# GQA repeat of K and V to every query head
FLASH_SKIP_ROLES = ("attn.scores", "attn.scale", "attn.softcap", "attn.mask", "attn.softmax",
                    "attn.repeat_kv")


class Stage:
    """One step of the forward: what it produces and what it costs (per occurrence).

    A plain class with slots rather than a dataclass: building a dataclass at import time costs
    more than a whole `trace --json` may spend on start-up.
    """

    FIELDS = (
        "name",
        "op",
        "group",
        "dims",
        "shape",
        "flops",
        "flops_formula",
        "elementwise_flops",
        "elementwise_formula",
        "params",
        "params_formula",
        "bytes",
        "dtype",
        "repeat",
        "note",
        "split",
        "role",
        "kind",
        "operands",
        "operand_dims",
    )
    __slots__ = (*FIELDS, "extra", "poly", "poly_causal")

    def __init__(
        self,
        name: str,
        op: str,
        group: str,
        dims: list[str],
        shape: list[int],
        flops: int = 0,
        flops_formula: str = "0",
        elementwise_flops: int = 0,
        elementwise_formula: str = "0",
        params: int = 0,
        params_formula: str = "0",
        bytes: int = 0,
        dtype: str = "",
        repeat: int = 1,
        note: str = "",
        split: str = "",  # how tensor parallelism shards this stage's weight: column, row, vocab
        role: str = "",
        kind: int | None = None,  # a block stage's layer kind (an index into the layer plan)
        operands: list[list[int]] | None = None,  # a matmul's [m,k] and [k,n] (with batch dims)
        operand_dims: list[list[str]] | None = None,  # the same in symbols (symbolic only)
        extra: dict[str, Any] | None = None,
    ):
        self.name, self.op, self.group, self.dims, self.shape = name, op, group, dims, shape
        self.flops, self.flops_formula = flops, flops_formula
        self.elementwise_flops, self.elementwise_formula = elementwise_flops, elementwise_formula
        self.params, self.params_formula = params, params_formula
        self.bytes, self.dtype, self.repeat, self.note, self.split = (
            bytes,
            dtype,
            repeat,
            note,
            split,
        )
        self.role, self.kind = role, kind
        self.operands = operands if operands is not None else []
        self.operand_dims = operand_dims if operand_dims is not None else []
        self.extra = extra if extra is not None else {}
        self.poly: tuple[Expr, Expr, Expr] | None = None  # see symbolic.stages(poly=True)
        # QKᵀ's and A·V's FLOPs as a causal kernel does them, where they are counted in full
        # (poly mode, prefill): what the closed form plans times on
        self.poly_causal: Expr | None = None

    def as_dict(self) -> dict[str, Any]:
        """The stage's JSON form: its fields in order, then any extra keys (a mask's dims)."""
        d = {f: getattr(self, f) for f in self.FIELDS}
        d.update(self.extra)
        return d

    def __repr__(self) -> str:
        return f"Stage({self.name!r}, {self.op!r}, {self.dims}, flops={self.flops})"
