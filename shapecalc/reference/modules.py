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
MIXER = ("mixer", "linear_attn", "conv", "mamba")  # Jamba's Mamba-1: mamba
MIXER_PREFIXES = ("ssm.", "gdn.", "conv.", "mamba.")
# the convolutions transformers' torch path runs as F.conv1d on the module's weight (to pad for
# its cache), not by calling the module: FlopCounterMode books their FLOPs on the mixer
FLOPS_ON_PARENT = frozenset({"ssm.conv", "gdn.conv", "conv.conv", "mamba.conv",
                             "mamba.dt"})  # Jamba: dt_proj's weight, applied in the scan

# role → candidate paths inside a layer, the first that exists wins: {a} is the layer's
# attention module, {f} its FFN module (the layer itself where it has none, as OPT)
_A, _F, _M = "{a}", "{f}", "{m}"
_QKV = (f"{_A}.qkv_proj", f"{_A}.query_key_value", f"{_A}.c_attn", f"{_A}.Wqkv", f"{_A}.W_pack")
LAYER_ROLES: dict[str, tuple[str, ...]] = {
    "attn.norm": ("input_layernorm", "ln_1", "ln_attn", "self_attn_layer_norm", "norm_1",
                  "operator_norm", "norm"),
    "ffn.norm": ("pre_feedforward_layernorm", "pre_mlp_layernorm", "post_attention_layernorm",
                 "ln_2", "ln_mlp",
                 "final_layer_norm", "norm_2", "ffn_norm", "pre_ff_layernorm", "norm"),
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
    "gdn.qkv": (f"{_M}.in_proj_qkv",),
    "gdn.z": (f"{_M}.in_proj_z",),
    "gdn.b": (f"{_M}.in_proj_b",),
    "gdn.a": (f"{_M}.in_proj_a",),
    "gdn.conv": (f"{_M}.conv1d",),
    "gdn.norm": (f"{_M}.norm",),
    "gdn.out": (f"{_M}.out_proj",),
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
    "attn.q": (f"{_A}.q_proj", f"{_A}.query", *_QKV),  # q, k, v apart where transformers fuses
    "attn.k": (f"{_A}.k_proj", f"{_A}.key", *_QKV),
    "attn.v": (f"{_A}.v_proj", f"{_A}.value", *_QKV),
    "attn.q_a": (f"{_A}.q_a_proj",),
    "attn.q_a_norm": (f"{_A}.q_a_layernorm",),
    "attn.q_b": (f"{_A}.q_b_proj",),
    "attn.kv_a": (f"{_A}.kv_a_proj_with_mqa",),
    "attn.kv_a_norm": (f"{_A}.kv_a_layernorm",),
    "attn.kv_b": (f"{_A}.kv_b_proj",),
    "attn.q_norm": (f"{_A}.q_norm", f"{_A}.q_layernorm"),
    "attn.k_norm": (f"{_A}.k_norm", f"{_A}.k_layernorm"),
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
    "moe.router": (f"{_F}.gate", f"{_F}.router"),
    # the routing's own parameters: Laguna's e_score_correction_bias is its router's (mlp.gate);
    # AFMoE's expert_bias its MoE block's (no mlp.gate: the block itself)
    "moe.route": (f"{_F}.gate",),
    "moe.experts.gate": (f"{_F}.experts",),
    "moe.experts.up": (f"{_F}.experts",),
    "moe.experts.down": (f"{_F}.experts",),
    "moe.shared.gate": (f"{_F}.shared_expert.gate_proj", f"{_F}.shared_experts.gate_proj",
                        f"{_F}.shared_expert.gate_up_proj", f"{_F}.shared_experts"),
    "moe.shared.up": (f"{_F}.shared_expert.up_proj", f"{_F}.shared_experts.up_proj",
                      f"{_F}.shared_expert.gate_up_proj", f"{_F}.shared_experts"),
    "moe.shared.down": (f"{_F}.shared_expert.down_proj", f"{_F}.shared_experts.down_proj",
                        f"{_F}.shared_experts"),
    "moe.shared_gate": (f"{_F}.shared_expert_gate",),
    # DeepSeek Sparse Attention's lightning indexer (its score matmuls run in its forward)
    "attn.index_q": (f"{_A}.indexer.wq_b",),
    "attn.index_k": (f"{_A}.indexer.wk",),
    "attn.index_k_norm": (f"{_A}.indexer.k_norm",),
    "attn.index_w": (f"{_A}.indexer.weights_proj",),
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
_LAYER_NORMS = ("attn.norm", "ffn.norm", "attn.post_norm", "ffn.post_norm", "mixer.norm",
                "mixer.post_norm")
# roles outside the layers: the last name of a module outside them
TOP_ROLES: dict[str, tuple[str, ...]] = {
    "embed": ("embed_tokens", "wte", "word_embeddings", "embed_in", "embeddings"),
    "embed.norm": ("word_embeddings_layernorm", "embed_norm"),  # Inkling: embed_tokens'
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
        self._cache: dict[tuple[str, int | None], str] = {}

    def _inside_layers(self, name: str) -> bool:
        return self.layers is not None and name.startswith(self.layers + ".")

    def _child(self, parent: str, names: tuple[str, ...]) -> str:
        for n in names:
            if f"{parent}.{n}" in self.known:
                return f"{parent}.{n}"
        return parent

    def module(self, role: str, layer: int | None) -> str:
        """The module that runs `role` (in `layer`, for a block stage)."""
        key = (role, layer)
        if key not in self._cache:
            self._cache[key] = self._find(role, layer)
        return self._cache[key]

    def _find(self, role: str, layer: int | None) -> str:
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
        for cand in LAYER_ROLES.get(role, ()):
            rel = cand.format(a=attn[len(base) + 1:], f=ffn[len(base) + 1:],
                              m=mixer[len(base) + 1:])
            path = f"{base}.{rel}"
            path = path.replace("..", ".").rstrip(".")
            if path in self.known:
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
