"""The draft of speculative decoding as a model shapecalc counts, and the cost of a step with it.

Every draft is a model with a closed form (its own IterationCost, on the target's GPUs, tp and
dtypes), plus the few matrices its architecture adds that a ModelConfig does not express:

- draft (`--draft-preset`/`--draft-config`): any model shapecalc reads, as vLLM's draft_model
  proposer (vllm/v1/spec_decode/draft_model.py) runs a smaller LM of the same vocabulary. A
  vocabulary of another size has no draft → target map: refused.
- eagle3 (`--draft-config` an EAGLE-3 config.json, e.g. yuhuili/EAGLE3-LLaMA3.1-Instruct-8B's:
  architectures LlamaForCausalLMEagle3, num_hidden_layers 1, vocab_size 128256,
  draft_vocab_size 32000): one Llama decoder layer whose q, k and v read [embedding; hidden]
  (2D wide), `fc` [3D → D] over the target's three fused hidden states, `hidden_norm`, and an
  LM head over the reduced draft vocabulary mapped to the target's by `d2t` (vLLM
  vllm/model_executor/models/llama_eagle3.py; SGLang llama_eagle3.py). The embedding is the
  target's (shared, not loaded). Counted as the one-layer model of D, H, H_kv, Dff and
  N_vocab = draft_vocab_size, less its embedding, plus fc (3D·D), the second half of q, k, v
  (D·(H + 2·H_kv)·Dh) and hidden_norm (D): 424,689,664 parameters for that config.
- mtp: the model's own MTP module (docs/reference/mtp.md), run k times for k drafts as vLLM's
  MTP proposer reuses it: the one-layer model of the last layer's kind with its own embedding and
  head (shared with the model under mtp_shared_head), plus eh_proj [2D → D] and enorm, hnorm.

A step of B decoding sequences on Σ L cached tokens (and any prefill chunks) costs, in order on
the same GPUs: the target's verify, each sequence's k + 1 query tokens on its cache (a chunk of
k + 1 tokens on L cached, plus the LM head of the k tokens a chunk does not project); the draft's
first pass over the same tokens (vLLM's EAGLE proposer runs its first forward over every token
the target just computed, the prefills' too); and k − 1 single-token draft passes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..costs.scalar import SCALARS
from ..model.config import DTYPE_BITS, ModelConfig, ShapecalcError, Workload, bytes_of, check
from ..plan.cases import closed_form_for
from ..plan.perf import step_seconds, step_terms
from .cost import VARYING, IterationCost
from .spec import Spec

FLOPS = ("flops", "flops_per_rank", "causal_flops", "causal_flops_per_rank")


@dataclass(frozen=True)
class Draft:
    """The draft as a model: its one-home counts come from `model`'s closed form; `first`,
    `each` and `split` the parameters of the matrices it adds: `first` read by the first pass
    only (fc), `each` by every pass, both replicated on every rank (fc, eh_proj, norms), `split`
    by every pass, split over tp (q, k, v's second input); `shared_embedding`: its token table
    is the target's (held once)."""

    kind: str
    model: ModelConfig
    first: int = 0
    each: int = 0
    split: int = 0  # of `each`'s kind, but split over tp (q, k, v's columns)
    shared_embedding: bool = False
    flag: str = "draft"


def eagle3_draft(cfg: dict[str, Any], target: ModelConfig) -> Draft:
    """The EAGLE-3 head of an EAGLE-3 config.json (module doc)."""
    def need(key: str) -> int:
        v = cfg.get(key)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ShapecalcError("draft-config", f"an EAGLE-3 config needs {key} (a whole number "
                                 f"≥ 1), got {v!r}")
        return v

    arch = cfg.get("architectures") or []
    if not any("eagle3" in str(a).lower() for a in arch):
        raise ShapecalcError("draft-config", f"--draft eagle3 reads an EAGLE-3 config "
                             f"(architectures LlamaForCausalLMEagle3), got {arch!r}")
    D, V = need("hidden_size"), need("vocab_size")
    dv = cfg.get("draft_vocab_size", V)
    if V != target.vocab_size:
        raise ShapecalcError("draft-config", f"the EAGLE-3 head maps onto a vocabulary of {V:,} "
                             f"tokens; {target.name}'s has {target.vocab_size:,}")
    if isinstance(dv, bool) or not isinstance(dv, int) or not 1 <= dv <= V:
        raise ShapecalcError("draft-config", f"draft_vocab_size must be in [1, vocab_size = "
                             f"{V:,}] (its d2t map goes into the target's), got {dv!r}")
    if cfg.get("target_hidden_size", D) != target.d_model or D != target.d_model:
        raise ShapecalcError("draft-config", f"the EAGLE-3 head fuses hidden states of width "
                             f"{D:,}; {target.name}'s are {target.d_model:,}")
    if need("num_hidden_layers") != 1:
        raise ShapecalcError("draft-config", "an EAGLE-3 head has one decoder layer "
                             "(num_hidden_layers 1)")
    H, Hkv = need("num_attention_heads"), cfg.get("num_key_value_heads") or need(
        "num_attention_heads")
    dh = cfg.get("head_dim") or D // H
    model = ModelConfig(name="eagle3-head", vocab_size=dv, d_model=D, n_layers=1, n_heads=H,
                        n_kv_heads=Hkv, d_ff=need("intermediate_size"), ffn="swiglu",
                        norm="rmsnorm", positions="rope", head_dim=dh,
                        max_positions=target.max_positions, tie_embeddings=False)
    qkv = D * (H + 2 * Hkv) * dh  # q, k, v's second D of input ([embedding; hidden])
    return Draft("eagle3", model, first=3 * D * D, each=D, split=qkv, shared_embedding=True,
                 flag="draft-config")


def mtp_draft(target: ModelConfig) -> Draft:
    """The model's own MTP module as a one-layer model of its kind (module doc)."""
    from ..model.plan import mtp_spec

    if not target.mtp_layers:
        raise ShapecalcError("draft", f"{target.name} has no MTP layers (mtp_layers = 0): "
                             "give --draft draft or eagle3")
    spec = mtp_spec(target)
    upd: dict[str, Any] = {"n_layers": 1, "mtp_layers": 0, "name": f"{target.name}-mtp"}
    if target.ffn_types is not None:
        upd["ffn_types"] = (spec.ffn,)
    if target.layer_types is not None:
        upd["layer_types"] = (spec.attention,)
    try:
        model = target.model_copy(update=upd)
        check(model, Workload())
    except (ShapecalcError, ValueError) as e:
        raise ShapecalcError("draft", f"{target.name}'s MTP module cannot be built as a "
                             f"one-layer model ({e})") from None
    D = target.d_model
    return Draft("mtp", model, each=2 * D * D + 2 * D, shared_embedding=target.mtp_shared_head)


def model_draft(draft: ModelConfig, target: ModelConfig, flag: str) -> Draft:
    if draft.vocab_size != target.vocab_size:
        raise ShapecalcError(flag, f"{draft.name}'s vocabulary of {draft.vocab_size:,} tokens "
                             f"cannot map onto {target.name}'s {target.vocab_size:,} (a draft "
                             "model has no draft → target map; EAGLE-3 heads do)")
    return Draft("draft", draft, flag=flag)


class SpecCost:
    """The seconds of a step with speculation (module doc): the target's verify plus the draft's
    passes, each perf.step_terms on its own totals, times added (they run one after another)."""

    def __init__(self, target: IterationCost, wl: Workload, draft: Draft, spec: Spec):
        self.t, self.spec, self.d = target, spec, draft
        self.k = spec.k
        dwl = wl.model_copy(update={"pp": 1, "ep": 1, "mtp": False})
        try:
            check(draft.model, dwl)
        except ShapecalcError as e:
            raise ShapecalcError(draft.flag, f"the draft {draft.model.name} at tp={wl.tp}: "
                                 f"{e.reason}") from None
        self.dc = IterationCost(closed_form_for(draft.model, dwl), target.gpu, target.pp, dwl,
                                target.peak)
        if self.dc.windowed:
            raise ShapecalcError(draft.flag, f"the draft {draft.model.name} has sliding, chunked "
                                 "or scanned layers: speculation is simulated with "
                                 "full-attention drafts")
        cf = target.cf
        dts = (wl.dtype, wl.kv, wl.act)
        every = closed_form_for(cf.model, wl.model_copy(update={"logits": "all"}))
        a = every.at(1, 2, "prefill", wl.tp, 1, *dts)
        b = cf.at(1, 2, "prefill", wl.tp, 1, *dts)
        self.head = {k: a[k] - b[k] for k in VARYING}  # one more token's LM head
        self.wbits = DTYPE_BITS[wl.dtype]
        c = self.dc.const
        self.each = draft.each + draft.split // wl.tp  # a rank's share of the added matrices
        own = c["params_per_rank"] - (c["embed_params_per_rank"] if draft.shared_embedding
                                      else 0) + draft.first + self.each
        self.draft_weight_bytes = bytes_of(own, self.wbits)
        self.draft_kv_per_token = self.dc.coeffs["kv_cache_bytes_per_rank"].d1
        self.target_kv_per_token = target.coeffs["kv_cache_bytes_per_rank"].d1
        self.memo: dict[int, list[tuple[float, float, float, float, float]]] = {}

    def _terms(self, ic: IterationCost, tot: dict[str, Any], tokens: int, decode: bool,
               extra: int = 0) -> tuple[float, float, float, float]:
        if extra:  # the draft's own matrices: 2 FLOPs a parameter a token, read once a pass
            for k in FLOPS:
                tot[k] += 2 * extra * tokens
            tot["params_per_rank"] += extra
        t = step_terms(ic.cf, ic.gpu, ic.pp, tot, ic.peak, tokens, self.wbits, SCALARS, ic.ep,
                       decode=decode)
        return float(t[0]), float(t[1]), float(t[2]), float(t[3])

    def parts(self, chunks: int, n: int, sq: int, ctx: int, B: int, cache: int
              ) -> list[tuple[float, float, float, float]]:
        """The terms of the target's verify, then of each draft pass."""
        k, t, dc, d = self.k, self.t, self.dc, self.d
        q = k + 1
        vc, vn = chunks + B, n + B * q
        vsq, vctx = sq + B * q * q + 2 * q * cache, ctx + cache
        tot = t.totals(vc, vn, vsq, vctx, 0, 0)
        for key, v in self.head.items():
            tot[key] += B * k * v
        out = [self._terms(t, tot, vn, chunks == 0)]
        out.append(self._terms(dc, dc.totals(vc, vn, vsq, vctx, 0, 0), vn, chunks == 0,
                               d.first + self.each))
        for i in range(1, k if B else 1):
            out.append(self._terms(dc, dc.totals(0, 0, 0, 0, B, cache + B * (q + i - 1)), B,
                                   True, self.each))
        return out

    def lin(self, B: int) -> list[tuple[float, float, float, float, float]]:
        """The parts of a pure decode step of B sequences as functions of their cache Σ L:
        (compute, its slope, memory, its slope, communication + overhead), each term affine in
        the cache at a fixed B (FLOPs and bytes are); made once per B."""
        memo = self.memo.get(B)
        if memo is None:
            span = B * 4096
            a, b = self.parts(0, 0, 0, 0, B, 0), self.parts(0, 0, 0, 0, B, span)
            memo = self.memo[B] = [(x[0], (y[0] - x[0]) / span, x[1], (y[1] - x[1]) / span,
                                    x[2] + x[3]) for x, y in zip(a, b, strict=True)]
        return memo

    def seconds(self, chunks: int, n: int, sq: int, ctx: int, B: int, cache: int) -> float:
        if chunks:  # the verify and the draft's first pass read the chunks; the rest decode
            out = sum(float(step_seconds(p, SCALARS))
                      for p in self.parts(chunks, n, sq, ctx, B, cache)[:2])
            rest = self.lin(B)[2:] if B else []
        else:
            out, rest = 0.0, self.lin(B)
        for c, dc, m, dm, k in rest:
            out += max(c + dc * cache, m + dm * cache) + k
        return out


def regime(parts: list[tuple[float, float, float, float]]) -> str:
    """Whether the target's verify step is bound by its memory reads (speculation's extra query
    tokens ride on the weights it reads anyway: it helps) or by compute (they cost)."""
    c, m, _, _ = parts[0]
    return "memory-bound" if m >= c else "compute-bound"

