"""The context T a command takes when none is given: it must fit the model.

T = min(2048, max_positions): a learned position table (GPT-2: 1,024 rows) refuses more, and a
model's max_positions is its longest context otherwise. Under a learned table a decode step's new
token takes position T+1, so a command that runs a decode step (trace --phase decode, fit,
compare, sweep over decode) takes at most max_positions − 1 there.
"""

from __future__ import annotations

from collections.abc import Iterable

from .config import ModelConfig

DEFAULT_SEQ = 2048  # T when the model allows it (Workload.seq)


def seq_limit(model: ModelConfig, phase: str) -> int | None:
    """The largest T the model has positions for in `phase` (None: no limit)."""
    cap = model.max_positions
    if cap is None:
        return None
    return cap - (1 if phase == "decode" and model.positions == "learned" else 0)


def default_seq(model: ModelConfig, phases: Iterable[str] = ("prefill",),
                preferred: int = DEFAULT_SEQ) -> int:
    """T when none is given: `preferred`, or less where the model's positions end."""
    limits = [x for x in (seq_limit(model, ph) for ph in phases) if x is not None]
    return max(1, min([preferred, *limits]))


def default_seq_note(model: ModelConfig, seq: int, preferred: int = DEFAULT_SEQ) -> str:
    """How a default T was chosen, for a header line: `T=1023 (default: min(2048, …))`."""
    if seq == preferred:
        return f"T={seq} (default)"
    cap = f"max_positions={model.max_positions}"
    if model.max_positions is not None and seq < model.max_positions:
        cap = f"max_positions − 1 = {seq}: a decode step's new token"
    return f"T={seq} (default: min({preferred}, {cap}))"


def resolved_fields(m: ModelConfig) -> dict[str, tuple[object, str]]:
    """The fields a config leaves None (or unsaid) that take their value from others: field →
    (the value used, where it comes from). `presets show` prints these, not None."""
    out: dict[str, tuple[object, str]] = {}
    if m.n_kv_heads is None:
        out["n_kv_heads"] = (m.kv_heads, "H")
    if m.head_dim is None:
        out["head_dim"] = (m.dh, "D_n + D_r" if m.mla else "D/H")
    if m.norm_bias is None:
        out["norm_bias"] = (m.has_norm_bias, f"{m.norm}: β {'yes' if m.has_norm_bias else 'no'}")
    if m.moe and m.d_ff_expert is None:
        out["d_ff_expert"] = (m.dff_expert, "Dff")
    if m.moe and m.n_shared_experts and m.d_ff_shared is None:
        out["d_ff_shared"] = (m.dff_shared, "Dff_e")
    if m.rotary_dim is None and m.positions == "rope" and not m.mla:
        out["rotary_dim"] = (m.rot, "Dh")
    if m.layer_types is None:
        out["layer_types"] = ("sliding" if m.sliding_window else "full", "every layer")
    if m.ffn_types is None:
        out["ffn_types"] = ("moe" if m.moe else "dense", "every layer")
    if m.max_positions is None:
        out["max_positions"] = ("no limit", "no learned table")
    return out
