"""The named conventions of the stateful token mixers: how their FLOPs are counted, and which
engine's state cache their bytes follow. The one home of both names and of the hook each mixer's
rules read (a mixer added later names itself in CONVENTION_MIXERS and passes its two formulas to
`pick`).

FLOPs (`Workload.mixer_flops`, `--mixer-flops`):
- `transformers-torch` (the default): FlopCounterMode on transformers 5.24's own torch path (T
  padded to whole chunks, the einsums that become bmm's, the solves uncounted).
- `fused`: what the GPU kernels compute (mamba_ssm's SSD, flash-linear-attention's chunked gated
  delta rule, the causal_conv1d kernels), derived from their source: interpret/fused.py.

State cache (`Workload.state_cache`, `--state-cache`):
- `transformers` (the default): the conv window of K_c inputs in the activations' dtype, the
  recurrent state in fp32, as transformers' cache holds them after a prefill (measured).
- `vllm`: vLLM's MambaStateShapeCalculator and MambaStateDtypeCalculator
  (vllm/model_executor/layers/mamba/mamba_utils.py): a conv state of K_c − 1 columns
  (`conv_kernel - 1`) in mamba_cache_dtype ("auto": the model's dtype) and the recurrent state
  in mamba_ssm_cache_dtype ("auto": the conv state's dtype), `state_dtype` here.
"""

from __future__ import annotations

from typing import Any, TypeVar

TORCH = "transformers-torch"
FUSED = "fused"
MIXER_FLOPS = (TORCH, FUSED)
FLOPS_MEANING = {TORCH: "FlopCounterMode's, torch path", FUSED: "the GPU kernels' (mamba_ssm, fla)"}
STATE_CACHES = ("transformers", "vllm")
FLA_CHUNK = 64  # chunk_gated_delta_rule_fwd_intra's fused kkt + solve path (BT == 64)
# the token mixers whose FLOPs follow a named convention and whose state follows a named cache.
# A mixer added later (mamba1, kda, short_conv, cca) names itself here; each of its symbolic
# stages gives `flops=pick(wl, <its torch formula>, <its kernel count from interpret/fused.py>)`
# and its executor records the same pick from its arrays' sizes (verify compares the two); its
# state records use conv_columns(wl, K_c) and recurrent_dtype(wl).
CONVENTION_MIXERS = frozenset({"mamba2", "gated_deltanet", "short_conv", "parallel", "cca"})
# every stateful mixer: its outputs name the default conventions; the ones not in
# CONVENTION_MIXERS (Mamba-1, KDA) refuse `fused` and `vllm` until their rules pick them
STATEFUL_MIXERS = CONVENTION_MIXERS | {"mamba1", "kda", "inkling"}

F = TypeVar("F")
# (`wl` is a Workload: named Any so that config.py, which reads these names, is not imported back)


def has_convention(mixers: tuple[str, ...] | list[str]) -> bool:
    return bool(STATEFUL_MIXERS & set(mixers))


def unwired(mixers: tuple[str, ...] | list[str]) -> list[str]:
    """The stateful mixers whose rules do not pick the conventions yet."""
    return sorted(set(mixers) & (STATEFUL_MIXERS - CONVENTION_MIXERS))


def mixer_flops(wl: Any) -> str:
    """The workload's FLOPs convention for the stateful mixers."""
    return wl.mixer_flops or TORCH


def pick(wl: Any, torch: F, fused: F) -> F:
    """A stage's FLOPs under the workload's convention: the hook of every mixer rule."""
    return fused if mixer_flops(wl) == FUSED else torch


def vllm_cache(wl: Any) -> bool:
    return wl.state_cache == "vllm"


def conv_columns(wl: Any, kernel: int) -> int:
    """Columns of the conv state per channel: transformers keeps K_c inputs, vLLM K_c − 1
    (mamba2_state_shape, gated_delta_net_state_shape: `conv_kernel - 1`)."""
    return kernel - 1 if vllm_cache(wl) else kernel


def recurrent_dtype(wl: Any) -> str:
    """The recurrent state's dtype: fp32 in transformers' scan; vLLM's mamba_ssm_cache_dtype
    (`state_dtype`, "auto": the conv state's, the model's dtype)."""
    if not vllm_cache(wl):
        return "fp32"
    return wl.state_dtype or wl.act


def mixer_tag(totals: dict[str, Any]) -> str:
    """What a trace's header adds for a model with stateful mixers: both conventions' names."""
    flops = totals.get("mixer_flops_convention", "none")
    if flops == "none":
        return ""
    return f" · mixers: {flops} FLOPs, {totals.get('state_cache_convention')} states"
