"""The vocabulary forward() is written in: each operation an interpreter answers (symbolic: shapes,
formulas, exact counts; NumPy: real arrays). forward.py and mla.py use only these."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

from .expr import Dim
from .plan import LayerPlan, LayerSpec
from .stage import Group, Split


class Ops:
    """The operations forward() is written in. Each returns the tensor it produces.

    Tensors are opaque to forward(): symbolic ones are shapes, numeric ones are arrays. Every
    operation that records a stage takes its `role` (what it is; weights are identified by
    (layer, role)) and its `name` (what the table prints).
    """

    def layers(self, plan: LayerPlan) -> Iterable[tuple[int, LayerSpec, int]]:
        """(layer, spec, kind) of the layers this interpreter runs."""
        raise NotImplementedError

    def group(self, g: Group) -> None:
        raise NotImplementedError

    def extra_layers(self, plan: LayerPlan, kind: int, count: int) -> Iterable[int]:
        """Layers N, N+1, …, N+count−1 of `kind` after the plan's N (the MTP modules' blocks),
        each yielded as its layer index."""
        raise NotImplementedError

    def token_ids(self, B: Dim, T: Dim) -> Any:
        raise NotImplementedError

    def embed(self, ids: Any, V: Dim, D: Dim, split: Split) -> Any:
        raise NotImplementedError

    def table(self, ids: Any, role: str, name: str, V: Dim, W: Dim) -> Any:
        """ids [B,T] → rows [B,T,W] of a table [V,W] of its own (Gemma 4's per-layer
        embeddings), replicated on every rank."""
        raise NotImplementedError

    def shared_kv(self, layer: int, B: Dim, Hkv: Dim, Tk: Dim, Dh: Dim) -> tuple[Any, Any]:
        """k and v [B,H_kv,Tk,Dh] as layer `layer`'s cache holds them after this step (its
        kv_cache's): read by a KV-sharing layer, which writes none (no stage)."""
        raise NotImplementedError

    def layer_input(self, x: Any, layer: int, role: str, name: str) -> Any:
        """x [B,N,T,w] → layer `layer`'s slice [B,T,w] (a view)."""
        raise NotImplementedError

    def positions(self, x: Any, kind: str, rows: int | None) -> Any:
        raise NotImplementedError

    def rope_angles(self, T: Dim, Dh: Dim, base: float, sliding: bool = False) -> Any:
        """[T,Dh/2] angles of base θ; `sliding`: the table of the sliding layers only."""
        raise NotImplementedError

    def scale(self, x: Any, role: str, name: str, factor: float, label: str) -> Any:
        raise NotImplementedError

    def norm(self, x: Any, role: str, name: str, width: Dim | None = None,
             kind: str | None = None) -> Any:
        """A norm over the last dim (`width`, default D) with γ (and β where the model has
        them); `kind` rmsnorm or layernorm (default the model's)."""
        raise NotImplementedError

    def linear(self, x: Any, role: str, name: str, d_in: Dim, d_out: Dim, bias: bool,
               split: Split) -> Any:
        raise NotImplementedError

    def split(self, x: Any, parts: list[Dim]) -> list[Any]:
        raise NotImplementedError

    def split_heads(self, x: Any, role: str, name: str, heads: Dim, Dh: Dim) -> Any:
        raise NotImplementedError

    def rope(self, x: Any, role: str, name: str, angles: Any) -> Any:
        """RoPE on the first R of each head's Dh (R = Dh unless partial rotary)."""
        raise NotImplementedError

    def head_norm(self, x: Any, role: str, name: str, heads: Dim) -> Any:
        """LayerNorm without β over each head's Dh, with a γ per head: [heads, Dh] params."""
        raise NotImplementedError

    def kv_cache(self, k: Any, v: Any, layer: int, Tk: Dim, Tc: Dim) -> tuple[Any, Any]:
        raise NotImplementedError

    def mla_cache(self, x: Any, layer: int, Tk: Dim, Tc: Dim, what: str) -> Any:
        """MLA: one cached tensor (tokens on its second-last axis) per layer, written in
        prefill; appended to and read whole (Tk tokens) in decode. `what` names its content."""
        raise NotImplementedError

    def index_cache(self, x: Any, layer: int, Tk: Dim, Tc: Dim, dtype: str) -> Any:
        """DSA: a layer's indexer keys k_I [B,T,D_I] cached apart from its latent, in `dtype`
        whatever the KV dtype (dots3: fp32); written in prefill, appended and read whole (Tk)
        in decode."""
        raise NotImplementedError

    def concat(self, parts: list[Any], role: str, name: str, heads: Dim | None = None) -> Any:
        """Parts side by side along the last dim; with `heads`, a one-head part is broadcast
        to every head first (MLA's shared k_rope)."""
        raise NotImplementedError

    def head_linear(self, x: Any, role: str, name: str, d_in: Dim, d_out: Dim, of: str,
                    part: str) -> Any:
        """[B,H,T,d_in] → [B,H,T,d_out] through each head's own [d_in,d_out] block of weight
        `of` (MLA's absorbed decode: `part` k multiplies by W_UKᵀ, v by W_UV)."""
        raise NotImplementedError

    # -- DeepSeek Sparse Attention (dsa.py) -----------------------------------------------------
    def head_sum(self, s: Any, w: Any, role: str, name: str) -> Any:
        """The indexer's scores [B,H_I,Tq,Tk] summed over its heads, weighted by w [B,Tq,H_I]:
        [B,1,Tq,Tk], one head (one matmul [1,H_I]×[H_I,Tk] per query)."""
        raise NotImplementedError

    def topk(self, s: Any, role: str, name: str, k: Dim) -> Any:
        """Index scores [B,1,Tq,Tk] → the selection: each query's min(K_sel, Tk) top keys."""
        raise NotImplementedError

    def shared_selection(self, role: str, name: str, k: Dim, keys: Dim) -> Any:
        """The selection of the last layer that ran `topk` (of min(K_sel, keys) keys per
        query): a layer that reuses it runs no indexer."""
        raise NotImplementedError

    def select_mask(self, s: Any, sel: Any, role: str, name: str) -> Any:
        """Scores [B,H,Tq,Tk] with every key outside the query's selection masked."""
        raise NotImplementedError

    def gather(self, x: Any, sel: Any, role: str, name: str) -> Any:
        """The cached latents [B,Tk,W] each query selected: [B,Tq,K,W]."""
        raise NotImplementedError

    def selected_matmul(self, a: Any, b: Any, role: str, name: str) -> Any:
        """Each query against its own gathered keys b [B,Tq,K,W]: a [B,H,Tq,W] gives scores
        [B,H,Tq,K] (a·bᵀ); a [B,H,Tq,K] gives values [B,H,Tq,W] (a·b). A causal count keeps
        only the selected keys a query may read."""
        raise NotImplementedError

    def repeat_kv(self, x: Any, role: str, name: str, groups: int, heads: Dim) -> Any:
        raise NotImplementedError

    def transpose_last(self, x: Any, role: str, name: str) -> Any:
        raise NotImplementedError

    def matmul(self, a: Any, b: Any, role: str, name: str, causal: bool, window: int | None,
               chunk: int | None = None) -> Any:
        """`causal`: the attention matmuls, whose causal-half count keeps only the (query, key)
        pairs the causal mask, the window W and the chunks of C allow."""
        raise NotImplementedError

    def softcap(self, x: Any, role: str, name: str, cap: float) -> Any:
        """c·tanh(x/c): values squashed into (−c, c) (Gemma 2)."""
        raise NotImplementedError

    def mask(self, s: Any, role: str, name: str,
             kind: Literal["causal", "padding", "window", "chunk"],
             window: int | None = None) -> Any:
        """`window`: W of a window mask, C of a chunk mask."""
        raise NotImplementedError

    def temperature(self, q: Any, role: str, name: str, beta: float = 0.1, floor: int = 8192,
                    shift: int = 1) -> Any:
        """A query temperature: q × (1 + β·ln(1 + ⌊(pos+shift)/S⌋)), one factor per query
        position (Llama 4's on NoPE layers: β 0.1, S 8192, shift 1; Ministral 3's: shift 0)."""
        raise NotImplementedError

    def alibi(self, s: Any, role: str, name: str) -> Any:
        """Scores [B,H,Tq,Tk] plus each head's linear bias −m_h·(i − j) (query position i, key
        position j; m_h the head's ALiBi slope): one add per score."""
        raise NotImplementedError

    def softmax(self, s: Any, role: str, name: str, sinks: Dim | None = None) -> Any:
        """Over the keys; with `sinks`, each head's learned logit joins as one more column
        (dropped from the output)."""
        raise NotImplementedError

    def route(self, logits: Any, role: str, name: str, k: Dim, by_id: bool = False) -> Any:
        """Router logits [B,T,E] → the k chosen experts of each token and their weights;
        `by_id`: the k experts are a function of the token id (hash routing), the scores
        only weigh them."""
        raise NotImplementedError

    def experts(self, h: Any, routing: Any, D: Dim, E: Dim, k: Dim, Dffe: Dim) -> Any:
        """Each token through its k routed experts (a gated or plain FFN of width Dff_e each),
        and their outputs combined by the routing weights: [B,T,D]."""
        raise NotImplementedError

    def clamp(self, x: Any, role: str, name: str, lo: float | None, hi: float) -> Any:
        """x clamped to [lo, hi] (no lower bound when lo is None): clamped SwiGLU."""
        raise NotImplementedError

    def merge_heads(self, x: Any, role: str, name: str) -> Any:
        raise NotImplementedError

    def head_gate(self, o: Any, g: Any, role: str, name: str) -> Any:
        """o [B,T,H·Dh] with each head's Dh values × that head's gate g [B,T,H] (LFM3)."""
        raise NotImplementedError

    def add(self, a: Any, b: Any, role: str, name: str) -> Any:
        raise NotImplementedError

    def activation(self, x: Any, role: str, name: str, kind: str) -> Any:
        raise NotImplementedError

    def mul(self, a: Any, b: Any, role: str, name: str) -> Any:
        raise NotImplementedError

    def allreduce(self, x: Any, role: str, name: str) -> Any:
        raise NotImplementedError

    def allgather(self, x: Any, role: str, name: str, full: Dim) -> Any:
        raise NotImplementedError

    def last_position(self, x: Any, role: str, name: str) -> Any:
        raise NotImplementedError

    # -- stateful token mixers (mamba2.py) ------------------------------------------------------
    def conv1d(self, x: Any, layer: int, role: str, name: str, channels: Dim, kernel: Dim,
               bias: bool) -> Any:
        """A causal depthwise convolution over the tokens of x [B,T,channels] (kernel K_c per
        channel); its window of past inputs is the layer's conv state (kept across steps)."""
        raise NotImplementedError

    def ssd(self, x: Any, dt: Any, b: Any, c: Any, layer: int) -> Any:
        """Mamba-2's selective scan (state-space duality): x [B,T,H_s·D_s], dt [B,T,H_s],
        b and c [B,T,G·N_s] → y [B,T,H_s·D_s]; the recurrent state [B,H_s,D_s,N_s] is kept.
        Prefill runs the chunked form, decode one step of the recurrence."""
        raise NotImplementedError

    def gated_norm(self, y: Any, gate: Any, role: str, name: str, gamma: Dim, groups: Dim,
                   gate_first: bool) -> Any:
        """An RMSNorm over each of `groups` groups of the last dim, × γ (`gamma` values, one set
        shared by the groups when fewer than the width), gated by silu(gate): before the norm
        (`gate_first`, Mamba-2: Norm(y ⊙ silu(z))) or after it (gated DeltaNet)."""
        raise NotImplementedError

    def delta_rule(self, q: Any, k: Any, v: Any, b: Any, a: Any, layer: Any) -> Any:
        """Gated DeltaNet's rule: q and k [B,T,H_qk·D_qk], v [B,T,H_v·D_hv], b and a [B,T,H_v]
        → o [B,T,H_v·D_hv]; each value head's state [D_qk, D_hv] is kept. Prefill runs the
        chunked form, decode one step of the recurrence."""
        raise NotImplementedError


    # -- hyper-connections (hyper.py) -----------------------------------------------------------
    def hc_expand(self, x: Any, role: str, name: str, n: Dim) -> Any:
        """[B,T,D] → [B,T,n_hc,D]: the same vector in each of n_hc residual streams."""
        raise NotImplementedError

    def hc_flatten(self, x: Any, role: str, name: str) -> Any:
        """[B,T,n_hc,D] → [B,T,n_hc·D], a view."""
        raise NotImplementedError

    def hc_weights(self, w: Any, role: str, name: str, n: Dim, iters: int) -> tuple[Any, ...]:
        """Mixing logits [B,T,(n_hc+2)·n_hc] → (pre, post, comb): σ(l·s+b)+ε, 2σ(l·s+b),
        softmax(l·s+b)+ε then `iters` Sinkhorn steps; logits [B,T,2·n_hc] (hc_mixing none) →
        (pre, post): post = 2σ(l·s+b)+ε; with iters 0 (the head), logits [B,T,n_hc] → (pre,).
        Owns the biases b and the scales s."""
        raise NotImplementedError

    def hc_collapse(self, x: Any, pre: Any, role: str, name: str) -> Any:
        """Σ_j pre_j·x_j: [B,T,n_hc,D] and [B,T,n_hc] → [B,T,D]."""
        raise NotImplementedError

    def hc_merge(self, x: Any, y: Any, post: Any, comb: Any, role: str, name: str) -> Any:
        """post ⊗ y + combᵀ·x (comb None: + x): streams [B,T,n_hc,D], output [B,T,D] →
        [B,T,n_hc,D]."""
        raise NotImplementedError

    # -- DeepSeek-V4's attention (compressed.py) -----------------------------------------------
    def shared_kv_cache(self, kv: Any, layer: int, Tk: Dim, Tc: Dim) -> Any:
        """One K=V tensor [B,1,T,Dh] per layer, cached once (it is both key and value):
        written in prefill, appended to and read whole (Tk tokens) in decode."""
        raise NotImplementedError

    def compress(self, kv: Any, gate: Any, layer: int, ratio: int, part: str = "hca") -> Any:
        """DeepSeek-V4's compressor: kv, gate [B,T,Dh] → every compressed entry so far
        [B,1,n,Dh]; each `ratio` tokens pooled by softmax(gate + position bias) over them, then
        RMS-normed (γ) and turned by RoPE at the window's position. The tokens of an unfinished
        window wait in its buffer (a state); the entries are cached like keys. `part` csa or
        idx (its indexer): kv and gate are 2w wide, each window's pool over 2m slots, its first
        m the previous window's first half (the last one kept as the overlap state)."""
        raise NotImplementedError

    def index_select(self, q: Any, k: Any, w: Any, ratio: int, topk: int) -> Any:
        """The csa indexer's choice: scores Σ_h w_h·ReLU(q_h·kᵀ)/√D_I/√H_I [B,T,n] over every
        entry, the entries not yet closed masked, the top min(K_sel, n): [B,T,K]
        (−1 where fewer are closed)."""
        raise NotImplementedError

    def cat_keys(self, a: Any, b: Any, role: str, name: str) -> Any:
        """[B,1,Ta,Dh] and [B,1,Tb,Dh] → [B,1,Ta+Tb,Dh] along the keys."""
        raise NotImplementedError

    def window_mask(self, s: Any, role: str, name: str, window: int | None,
                    ratio: int | None, selected: Any = None) -> Any:
        """Prefill scores [B,H,T,T+n]: query t reads keys t−W < j ≤ t and the entries e with
        (e+1)·m′ ≤ t+1 (their whole window seen); with `selected` (csa: [B,T,K]) only those
        entries, in decode too; one add per score (eager's additive mask)."""
        raise NotImplementedError

    def grouped_linear(self, x: Any, role: str, name: str, groups: Dim, d_in: Dim,
                       d_out: Dim) -> Any:
        """[B,T,d_in] as `groups` groups of d_in/groups, each through its own [d_in/groups,
        d_out] block → [B,T,groups·d_out] (a batched matmul: 2·B·T·d_in·d_out)."""

    def selective_scan(self, x: Any, dt: Any, b: Any, c: Any, layer: int) -> Any:
        """Mamba-1's selective scan: x and dt [B,T,D_i], b and c [B,T,N_s] → y [B,T,D_i] (with
        the skip D·x); each channel's state [D_i, N_s] is kept. One form: the recurrence, T
        steps in prefill, one in decode."""

    def kda(self, q: Any, k: Any, v: Any, f: Any, b: Any, layer: Any) -> Any:
        """Kimi Delta Attention's rule: q, k, v and the forget gate's f [B,T,H·D_k], b [B,T,H]
        → o [B,T,H·D_k]; each head's state [D_k, D_k] is kept. Prefill runs the chunked form,
        decode one step of the recurrence."""

    # -- CCA (cca.py) ---------------------------------------------------------------------------
    def cca_residual(self, q: Any, k: Any, role: str, name: str) -> tuple[Any, Any]:
        """q [B,T,H·Dh], k [B,T,H_kv·Dh] → (q_r, k_r): q_r = (q + each head's KV head's k)/2,
        k_r = the mean of q_r over each KV head's group of query heads."""
        raise NotImplementedError

    def cca_conv(self, x: Any, layer: int, role: str, name: str, channels: Dim) -> Any:
        """CCA's two causal convs over x [B,T,channels] padded by K_q tokens: depthwise of K_d,
        then grouped by head (Dh channels a group) of K_g, each with a bias; the last K_q inputs
        are the layer's conv state."""
        raise NotImplementedError

    def delay(self, x: Any, layer: int, role: str, name: str) -> Any:
        """x [B,T,w] one token late: position t gets x[t−1], the first the state (the last
        token's x of the previous step; in a prefill, the projection of a zero token). The
        last x is kept as the layer's recurrent state."""
        raise NotImplementedError

    def head_scale(self, x: Any, role: str, name: str, heads: Dim) -> Any:
        """x [B,heads,T,Dh] × a learned scalar per head ([heads] params)."""
        raise NotImplementedError

    # -- ZAYA (zaya.py) -------------------------------------------------------------------------
    def affine(self, x: Any, role: str, name: str) -> Any:
        """x [B,T,D] → (x + b)·s, b and s learned vectors of D."""
        raise NotImplementedError

    def scaled_residual(self, x: Any, y: Any, role: str, name: str) -> Any:
        """The residual add (y + b_y)·s_y + (x + b_x)·s_x: four learned vectors of D."""
        raise NotImplementedError

    def depth_carry(self, r: Any, role: str, name: str, add: bool) -> Any:
        """ZAYA's router state passed down the layers: with `add`, r + the previous layer's
        state × a learned scale (r's width of params); the result is the next layer's state."""
        raise NotImplementedError

    # -- block-sparse attention (block_sparse.py) -----------------------------------------------
    def block_cache(self, k: Any, layer: int, Tk: Dim, Tc: Dim) -> Any:
        """The block indexer's key [B,T,D_I], cached per layer beside K and V (written in
        prefill, appended in decode): every cached one, [B,1,Tk,D_I]."""
        raise NotImplementedError

    def block_topk(self, s: Any, role: str, name: str, size: int, top: int, local: int) -> Any:
        """Indexer scores [B,H_I,Tq,Tk] → the selection: per query and indexer head, the top
        min(K_blk, ⌈Tk/S_blk⌉) blocks by their largest score, the L_blk ending at the query's
        own block first; blocks of no readable key are not valid."""
        raise NotImplementedError

    def block_mask(self, s: Any, sel: Any, role: str, name: str) -> Any:
        """Scores [B,H,Tq,Tk] with every key outside the query's selected blocks masked (each
        indexer head's selection serves H/H_I query heads)."""
        raise NotImplementedError

    def block_matmul(self, a: Any, b: Any, sel: Any, role: str, name: str) -> Any:
        """The block-sparse kernel: q [B,H,Tq,Dh] × kᵀ gives scores [B,H,Tq,Tk] (role
        attn.scores), A × v the output [B,H,Tq,Dh], each counted over the keys of the query's
        selected blocks that it may read only."""
        raise NotImplementedError

    # -- Inkling (inkling.py) -------------------------------------------------------------------
    def res_conv(self, x: Any, layer: int, role: str, name: str, channels: Dim) -> Any:
        """x + a causal depthwise conv of x [B,T,channels] (kernel K_c, no bias), in fp32; its
        window of the last K_c inputs (fp32) is a conv state of the layer's own, one per role."""
        raise NotImplementedError

    def rel_bias(self, s: Any, r: Any, role: str, name: str, extent: Dim) -> Any:
        """Scores [B,H,Tq,Tk] + a bias by distance: r [B,Tq,H·D_rel] through the profiles
        [D_rel, X] (X = extent) gives [B,H,Tq,X]; query i and key j add the one at i − j (0 when
        i − j ≥ X)."""
        raise NotImplementedError

    def sink_route(self, logits: Any, role: str, name: str, k: Dim, shared: Dim
                   ) -> tuple[Any, Any]:
        """Router logits [B,T,E+n_s] → (the routing of the k chosen experts, the n_s shared
        experts' weights [B,T,n_s]): the top k of sigmoid(logits[:E]) + a correction bias (a
        buffer); a softmax over the log-sigmoids of those k and the n_s shared logits, × the
        route scale × a learned scalar."""
        raise NotImplementedError

    def bank_scale(self, u: Any, g: Any, role: str, name: str, n: Dim) -> Any:
        """u [B,T,n_s·Dff_s] with each shared expert's Dff_s values × its weight g [B,T,n_s]."""
        raise NotImplementedError

    def learned_scale(self, x: Any, role: str, name: str) -> Any:
        """x × one learned scalar."""
        raise NotImplementedError

    def log_scale(self, x: Any, role: str, name: str, alpha: float, floor: int) -> Any:
        """x [B,H,Tq,·] with each query row × τ = 1 + α·ln(max(1, (pos+1)/floor)), pos the
        query's place in the step and the cache (Inkling's full layers)."""
        raise NotImplementedError
