"""Which transformers module each shapecalc stage is, and where two per-module counts part.

Stdlib only (no torch): it works on module paths. A stage's role (model/stage.py) and its layer
give the module transformers runs it in: `attn.q` of layer 3 is `<layers>.3.self_attn.q_proj` in
Llama, `...attention.query_key_value` is `attn.qkv` in GPT-NeoX. A role whose module a family
lacks falls back to the nearest container (the attention or FFN module, the layer, the model):
counts are compared subtree by subtree, so a coarse place still finds the first difference.
"""

from __future__ import annotations

from collections.abc import Iterable

ROOT = "(model)"  # the key of counts on the model object itself

# children of a decoder layer that hold its attention, and its FFN (dense or MoE)
ATTENTION = ("self_attn", "attn", "attention", "self_attention", "mixer")  # Nemotron-H: mixer
FFN = ("mlp", "feed_forward", "block_sparse_moe", "moe", "ffn", "mixer")
# a stateful token mixer's module: Nemotron-H's Mamba-2, Qwen3-Next's gated DeltaNet, LFM2's conv
# Kimi Linear's and Ling's KDA layer: self_attn (only a stateful layer's roles look for {m})
MIXER = ("mixer", "linear_attn", "conv", "mamba", "self_attn")  # Jamba's Mamba-1: mamba
MIXER_PREFIXES = ("ssm.", "gdn.", "conv.", "mamba.", "kda.", "cca.")
# the convolutions transformers' torch path runs as F.conv1d on the module's weight (to pad for
# its cache), not by calling the module: FlopCounterMode books their FLOPs on the mixer
FLOPS_ON_PARENT = frozenset({"ssm.conv", "gdn.conv", "conv.conv", "mamba.conv", "kda.conv",
                             "mamba.dt"})  # Jamba: dt_proj's weight, applied in the scan

# role → candidate paths inside a layer, the first that exists wins: {a} is the layer's
# attention module, {f} its FFN module (the layer itself where it has none, as OPT), {m} its
# stateful mixer's. `a.q_proj+k_proj+v_proj` names siblings that transformers holds apart and
# shapecalc computes as one stage (OLMo-hybrid's and KDA's q, k, v): compared as one module
_A, _F, _M = "{a}", "{f}", "{m}"
_QKV = (f"{_A}.qkv_proj", f"{_A}.query_key_value", f"{_A}.c_attn", f"{_A}.Wqkv", f"{_A}.W_pack")
LAYER_ROLES: dict[str, tuple[str, ...]] = {
    "attn.norm": ("input_layernorm", "ln_1", "ln_attn", "self_attn_layer_norm", "norm_1",
                  "operator_norm", "attention_layernorm", "norm"),  # Apertus: attention_...
    "ffn.norm": ("pre_feedforward_layernorm", "pre_mlp_layernorm", "post_attention_layernorm",
                 "ln_2", "ln_mlp",
                 "final_layer_norm", "norm_2", "ffn_norm", "pre_ff_layernorm",
                 "feedforward_layernorm", "norm"),
    "attn.post_norm": ("post_attention_layernorm", "post_operator_norm"),
    "ffn.post_norm": ("post_feedforward_layernorm", "post_mlp_layernorm", "post_ffn_norm"),
    "mixer.norm": ("norm", "input_layernorm", "operator_norm"),
    "mixer.post_norm": ("post_operator_norm",),
    "ssm.in": (f"{_M}.in_proj",),
    "ssm.conv": (f"{_M}.conv1d",),
    "ssm.norm": (f"{_M}.norm",),
    "ssm.out": (f"{_M}.out_proj",),
    "gdn.qkvz": (f"{_M}.in_proj_qkvz",),
    "gdn.ba": (f"{_M}.in_proj_ba",),
    # OLMo-hybrid's gated DeltaNet: q, k, v, a, b, g projections apart, o_norm, o_proj
    "gdn.qkv": (f"{_M}.in_proj_qkv", f"{_M}.q_proj+k_proj+v_proj"),
    "gdn.z": (f"{_M}.in_proj_z", f"{_M}.g_proj"),
    "gdn.b": (f"{_M}.in_proj_b", f"{_M}.b_proj"),
    "gdn.a": (f"{_M}.in_proj_a", f"{_M}.a_proj"),
    "gdn.conv": (f"{_M}.conv1d",),
    "gdn.norm": (f"{_M}.norm", f"{_M}.o_norm"),
    "gdn.out": (f"{_M}.out_proj", f"{_M}.o_proj"),
    # KDA (Kimi Linear, Ling): its forget gate's projections (low-rank f_a/f_b or one f_proj)
    # and A_log/dt_bias in forget_gate, the output gate's g_a/g_b or g_proj, o_norm
    "kda.qkv": (f"{_M}.q_proj+k_proj+v_proj",),
    "kda.f_a": (f"{_M}.forget_gate.f_a_proj",),
    "kda.f_b": (f"{_M}.forget_gate.f_b_proj",),
    "kda.f": (f"{_M}.forget_gate.f_proj",),
    "kda.gates": (f"{_M}.forget_gate",),
    "kda.b": (f"{_M}.b_proj",),
    "kda.conv": (f"{_M}.conv1d",),
    "kda.g_a": (f"{_M}.g_a_proj",),
    "kda.g_b": (f"{_M}.g_b_proj",),
    "kda.g": (f"{_M}.g_proj",),
    "kda.norm": (f"{_M}.o_norm",),
    "kda.out": (f"{_M}.o_proj",),
    "mamba.in": (f"{_M}.in_proj",),
    "mamba.conv": (f"{_M}.conv1d",),
    "mamba.x": (f"{_M}.x_proj",),
    "mamba.dt": (f"{_M}.dt_proj",),
    "mamba.dt_norm": (f"{_M}.dt_layernorm",),
    "mamba.b_norm": (f"{_M}.b_layernorm",),
    "mamba.c_norm": (f"{_M}.c_layernorm",),
    "mamba.out": (f"{_M}.out_proj",),
    "conv.in": (f"{_M}.in_proj",),
    "conv.conv": (f"{_M}.conv",),
    "conv.out": (f"{_M}.out_proj",),
    "attn.qkv": _QKV,
    # q, k, v apart where transformers fuses; ZAYA's CCA holds them in its qkv_proj module
    "attn.q": (f"{_A}.q_proj", f"{_A}.query", f"{_A}.qkv_proj.q_proj", *_QKV),
    "attn.k": (f"{_A}.k_proj", f"{_A}.key", f"{_A}.qkv_proj.k_proj", *_QKV),
    "attn.v": (f"{_A}.v_proj", f"{_A}.value", *_QKV),
    "attn.q_a": (f"{_A}.q_a_proj",),
    "attn.q_a_norm": (f"{_A}.q_a_layernorm", f"{_A}.q_a_norm"),  # DeepSeek-V4: q_a_norm
    "attn.q_b": (f"{_A}.q_b_proj",),
    "attn.kv_a": (f"{_A}.kv_a_proj_with_mqa",),
    "attn.kv_a_norm": (f"{_A}.kv_a_layernorm",),
    "attn.kv_b": (f"{_A}.kv_b_proj",),
    "attn.q_norm": (f"{_A}.q_norm", f"{_A}.q_layernorm", f"{_A}.query_layernorm"),  # Hunyuan
    "attn.k_norm": (f"{_A}.k_norm", f"{_A}.k_layernorm", f"{_A}.key_layernorm"),
    "attn.k_rope_norm": (f"{_A}.k_rope_only_layernorm",),  # dots3's norm of k's rotated part
    # DeepSeek-V4: its one K=V projection and norm, its grouped output's two projections
    "attn.kv": (f"{_A}.kv_proj",),
    "attn.kv_norm": (f"{_A}.kv_norm",),
    "attn.o_a": (f"{_A}.o_a_proj",),
    "attn.o_b": (f"{_A}.o_b_proj",),
    # its compressor (csa or hca layers: one `compressor` each) and the csa indexer inside it
    **{f"attn.{part}.{r}": (f"{_A}.compressor.{mod}",) for part in ("csa", "hca")
       for r, mod in (("kv", "kv_proj"), ("gate", "gate_proj"), ("norm", "kv_norm"))},
    **{f"attn.{part}.pool": (f"{_A}.compressor",) for part in ("csa", "hca")},  # position bias
    "attn.idx.kv": (f"{_A}.compressor.indexer.kv_proj",),
    "attn.idx.gate": (f"{_A}.compressor.indexer.gate_proj",),
    "attn.idx.norm": (f"{_A}.compressor.indexer.kv_norm",),
    "attn.idx.pool": (f"{_A}.compressor.indexer",),
    "attn.idx.q": (f"{_A}.compressor.indexer.q_b_proj",),
    "attn.idx.w": (f"{_A}.compressor.indexer.scorer.weights_proj",),
    "attn.idx.scores": (f"{_A}.compressor.indexer.scorer",),
    # ZAYA's CCA: v of this token and of the previous, the q/k convs, k's per-head scale
    "cca.v_now": (f"{_A}.qkv_proj.v_proj_current",),
    "cca.v_delayed": (f"{_A}.qkv_proj.v_proj_delayed",),
    "cca.delay": (f"{_A}.qkv_proj.v_proj_delayed",),  # the prefill's first token: of a zero token
    "cca.conv": (f"{_A}.qkv_proj.conv_qk_depthwise",),
    "cca.conv_grouped": (f"{_A}.qkv_proj.conv_qk_grouped",),
    "cca.k_scale": (f"{_A}.qk_norm",),
    # the attention output gate: AFMoE's gate_proj; Laguna's per-channel g_proj; Qwen3-Next's and
    # Qwen3.5's q_proj's second half
    "attn.gate": (f"{_A}.gate_proj", f"{_A}.g_proj", f"{_A}.q_proj"),
    "attn.head_gate": (f"{_A}.g_proj",),  # LFM3's and Laguna's per-head gate
    "attn.out": (f"{_A}.o_proj", f"{_A}.dense", f"{_A}.c_proj", f"{_A}.out_proj"),
    "ffn.gate": (f"{_F}.gate_proj", f"{_F}.gate_up_proj", f"{_F}.w1"),
    "ffn.up": (f"{_F}.up_proj", f"{_F}.gate_up_proj", f"{_F}.c_fc", f"{_F}.dense_h_to_4h",
               f"{_F}.fc1", f"{_F}.fc_in", f"{_F}.w3"),
    "ffn.down": (f"{_F}.down_proj", f"{_F}.c_proj", f"{_F}.dense_4h_to_h", f"{_F}.fc2",
                 f"{_F}.fc_out", f"{_F}.w2"),
    "ffn.act": (f"{_F}.act_fn",),  # Apertus' xIELU holds its alphas
    # ZAYA's router MLP (mlp.gate): its down-projection, then router_mlp's norm, fc1, fc2, out
    "moe.router": (f"{_F}.gate.router_mlp.out_proj", f"{_F}.gate", f"{_F}.router"),
    "moe.router.down": (f"{_F}.gate.down_proj",),
    "moe.router.eda": (f"{_F}.gate",),
    "moe.router.norm": (f"{_F}.gate.router_mlp.norm",),
    "moe.router.fc1": (f"{_F}.gate.router_mlp.fc1",),
    "moe.router.fc2": (f"{_F}.gate.router_mlp.fc2",),
    # the routing's own parameters: Laguna's e_score_correction_bias is its router's (mlp.gate);
    # AFMoE's expert_bias its MoE block's (no mlp.gate: the block itself)
    "moe.route": (f"{_F}.gate",),
    "moe.experts.gate": (f"{_F}.experts",),
    "moe.experts.up": (f"{_F}.experts",),
    "moe.experts.down": (f"{_F}.experts",),
    # the shared expert: Hunyuan's mlp.shared_mlp, Granite 4's shared_mlp beside the MoE block
    # (its input_linear fuses gate and up), MiniMax-M3's fused gate_up_proj
    "moe.shared.gate": (f"{_F}.shared_expert.gate_proj", f"{_F}.shared_experts.gate_proj",
                        f"{_F}.shared_expert.gate_up_proj", f"{_F}.shared_experts.gate_up_proj",
                        f"{_F}.shared_mlp.gate_proj", "shared_mlp.input_linear",
                        f"{_F}.shared_experts"),
    "moe.shared.up": (f"{_F}.shared_expert.up_proj", f"{_F}.shared_experts.up_proj",
                      f"{_F}.shared_expert.gate_up_proj", f"{_F}.shared_experts.gate_up_proj",
                      f"{_F}.shared_mlp.up_proj", "shared_mlp.input_linear",
                      f"{_F}.shared_experts"),
    "moe.shared.down": (f"{_F}.shared_expert.down_proj", f"{_F}.shared_experts.down_proj",
                        f"{_F}.shared_mlp.down_proj", "shared_mlp.output_linear",
                        f"{_F}.shared_experts"),
    "moe.shared_gate": (f"{_F}.shared_expert_gate",),
    # DeepSeek Sparse Attention's lightning indexer (its score matmuls run in its forward)
    "attn.index_q": (f"{_A}.indexer.wq_b",),
    "attn.index_k": (f"{_A}.indexer.wk",),
    "attn.index_k_norm": (f"{_A}.indexer.k_norm",),
    "attn.index_w": (f"{_A}.indexer.weights_proj",),
    # MiniMax-M3's block indexer: its q and k projections and norms
    "attn.bidx.q": (f"{_A}.indexer.q_proj",),
    "attn.bidx.q_norm": (f"{_A}.indexer.q_norm",),
    "attn.bidx.k": (f"{_A}.indexer.k_proj",),
    "attn.bidx.k_norm": (f"{_A}.indexer.k_norm",),
    **{f"attn.{part}": (f"{_A}.indexer",) for part in ("index_scores", "index_sum", "topk")},
    # hyper-connections (DeepSeek-V4, Hunyuan 4): each block half's mixing module; the merge
    # (post ⊗ y + combᵀ·x) runs in the layer's own forward
    **{f"hc.{half}.{part}": (f"{half}_hc",) for half in ("attn", "ffn")
       for part in ("flat", "norm", "proj", "weights", "sinkhorn", "collapse")},
    "attn.v_norm": (f"{_A}.v_norm",),
    # Gemma 4's per-layer input: its gate and projection in the layer, beside the attention
    "ple.gate": ("per_layer_input_gate",),
    "ple.out": ("per_layer_projection",),
    "ple.post_norm": ("post_per_layer_input_norm",),
    # Inkling: its four short convs (F.conv1d on each module's weight: the FLOPs are the
    # module's), the relative-state projection and its bias profiles, the shared experts' bank
    "conv.k": (f"{_A}.k_sconv",),
    "conv.v": (f"{_A}.v_sconv",),
    "conv.attn": ("attn_sconv",),
    "conv.ffn": ("mlp_sconv",),
    "attn.r": (f"{_A}.r_proj",),
    "attn.rel_bias.profiles": (f"{_A}.rel_logits_proj",),
}
# a role a layer runs more than once, each time in its own module: the n-th stage's candidates
NTH_ROLES: dict[str, tuple[tuple[str, ...], ...]] = {
    # ZAYA's scaled residuals (attention's half, then the FFN's)
    "residual": (("post_attention_residual_scale",), ("post_mlp_residual_scale",)),
}
_LAYER_NORMS = ("attn.norm", "ffn.norm", "attn.post_norm", "ffn.post_norm", "mixer.norm",
                "mixer.post_norm")
# roles outside the layers: the last name of a module outside them
TOP_ROLES: dict[str, tuple[str, ...]] = {
    "embed": ("embed_tokens", "wte", "word_embeddings", "embed_in", "embeddings"),
    "embed.norm": ("word_embeddings_layernorm", "embed_norm"),  # Inkling: embed_tokens'
    "embed.affine": ("model",),  # ZAYA's input scale and bias: its base model's own
    "pos.add": ("wpe", "embed_positions"),
    "head.norm": ("norm", "ln_f", "final_layer_norm", "final_layernorm", "norm_f",
                  "embedding_norm"),  # LFM2's final norm is its embedding_norm
    "head.lm": ("lm_head", "embed_out"),
    **{f"hc.head.{part}": ("hc_head",) for part in ("flat", "norm", "proj", "weights",
                                                     "collapse")},
    # Gemma 4's per-layer embeddings: the packed table, the projection and its norm
    "ple.embed": ("embed_tokens_per_layer",),
    "ple.proj": ("per_layer_model_projection",),
    "ple.norm": ("per_layer_projection_norm",),
}


class Places:
    """The module of each (role, layer) in one transformers model, from its module paths and the
    path of its decoder layers' list (`layers`, e.g. 'model.layers')."""

    def __init__(self, modules: Iterable[str], layers: str | None) -> None:
        self.modules = list(modules)
        self.known = set(self.modules)
        self.layers = layers
        self._cache: dict[tuple[str, int | None, int], str] = {}
        self.joined: dict[str, str] = {}  # a module → the joint name it is compared under

    def _inside_layers(self, name: str) -> bool:
        return self.layers is not None and name.startswith(self.layers + ".")

    def _child(self, parent: str, names: tuple[str, ...]) -> str:
        for n in names:
            if f"{parent}.{n}" in self.known:
                return f"{parent}.{n}"
        return parent

    def module(self, role: str, layer: int | None, nth: int = 0) -> str:
        """The module that runs `role` (in `layer`, for a block stage; its `nth` stage of that
        role in the layer)."""
        key = (role, layer, nth)
        if key not in self._cache:
            self._cache[key] = self._find(role, layer, nth)
        return self._cache[key]

    def _exists(self, path: str) -> bool:
        """A module, or siblings joined by '+' (each must exist: they are then one joint)."""
        parent, _, last = path.rpartition(".")
        parts = [f"{parent}.{n}" for n in last.split("+")]
        if not all(p in self.known for p in parts):
            return False
        if len(parts) > 1:
            self.joined.update(dict.fromkeys(parts, path))
        return True

    def join(self, counts: dict[str, int]) -> dict[str, int]:
        """transformers' per-module counts with joined siblings summed under their joint."""
        out: dict[str, int] = {}
        for name, v in counts.items():
            at = self.joined.get(name, name)
            out[at] = out.get(at, 0) + v
        return out

    def _find(self, role: str, layer: int | None, nth: int) -> str:
        if layer is None:  # the embedding's and the head's: outside the layers
            for name in self.modules:
                if name.rpartition(".")[2] in TOP_ROLES.get(role, ()) and not (
                        self._inside_layers(name)):
                    return name
            return ROOT
        base = f"{self.layers}.{layer}"
        if base not in self.known:  # more layers than transformers built
            return self.layers if self.layers in self.known else ROOT
        attn, ffn = self._child(base, ATTENTION), self._child(base, FFN)
        mixer = self._child(base, MIXER)
        nths = NTH_ROLES.get(role, ())
        for cand in nths[nth] if nth < len(nths) else LAYER_ROLES.get(role, ()):
            rel = cand.format(a=attn[len(base) + 1:], f=ffn[len(base) + 1:],
                              m=mixer[len(base) + 1:])
            path = f"{base}.{rel}"
            path = path.replace("..", ".").rstrip(".")
            if self._exists(path):
                return path
        if role in _LAYER_NORMS:  # the layer's own norms are its children, not attention's
            return base
        if role.startswith("attn."):
            return attn
        if role.startswith(("ffn.", "moe.")):
            return ffn
        if role.startswith(MIXER_PREFIXES):  # its per-head parameters (A_log, D, dt_bias)
            return mixer
        return base

    def attention(self, layer: int) -> str:
        """Layer `layer`'s attention module (its cache is that module's)."""
        base = f"{self.layers}.{layer}"
        return self._child(base, ATTENTION) if base in self.known else (self.layers or ROOT)


def _parent(name: str, known: set[str]) -> str:
    parts = name.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        if (p := ".".join(parts[:cut])) in known:
            return p
    return ROOT


def first_difference(measured: dict[str, int], ours: dict[str, int],
                     order: list[str]) -> str | None:
    """The module where two per-module counts (each module's own, not its children's) part:
    from the model down, the first child in forward `order` whose subtree totals differ, until a
    module none of whose children differ, or below which `ours` places nothing. None if the two
    agree everywhere."""
    known = set(order) | set(measured) | set(ours)
    known.discard(ROOT)
    rank = {n: i for i, n in enumerate(order)}
    children: dict[str, list[str]] = {}
    for n in known:
        children.setdefault(_parent(n, known), []).append(n)
    sub_m: dict[str, int] = {}
    sub_o: dict[str, int] = {}
    for counts, sub in ((measured, sub_m), (ours, sub_o)):
        for name, v in counts.items():
            node = name
            while True:
                sub[node] = sub.get(node, 0) + v
                if node == ROOT:
                    break
                node = _parent(node, known)
    below_ours = {_parent(n, known) for n in ours if n != ROOT}
    closure = set()
    for n in below_ours:  # every ancestor of a module ours counts in has ours below it
        while n not in closure:
            closure.add(n)
            if n == ROOT:
                break
            n = _parent(n, known)
    # transformers' counts below a module that shapecalc counts as one (a per-head norm's
    # ModuleList) are that module's: compare at shapecalc's grain
    lifted: dict[str, int] = {}
    for name, v in measured.items():
        node, at = name, name
        while node != ROOT and node not in closure:
            node = _parent(node, known)
            if node in ours and node not in closure:
                at = node
        lifted[at] = lifted.get(at, 0) + v
    differ = {n for n in known | {ROOT} if lifted.get(n, 0) != ours.get(n, 0)}
    if not differ:
        return None
    holds = set()  # modules at or below which some module's own counts differ
    for n in differ:
        while n not in holds:
            holds.add(n)
            if n == ROOT:
                break
            n = _parent(n, known)
    node = ROOT
    while node == ROOT or node in closure:
        kids = sorted(children.get(node, []), key=lambda n: (rank.get(n, len(rank)), n))
        # where the totals part first; else (differences that cancel) where any module differs
        nxt = next((k for k in kids if sub_m.get(k, 0) != sub_o.get(k, 0)),
                   next((k for k in kids if k in holds), None))
        if nxt is None:
            break
        node = nxt
    return node
