"""The token mixers whose training step has a backward rule, one file each (vjp_mamba2.py,
vjp_deltanet.py): the registry imports them, they import nothing of it. train and verify --train
take a model whose every mixer is here (train/memory.check_trainable); a mixer without a rule is
refused until its file is added to `FILES`."""

from __future__ import annotations

from ..model.stage import Stage
from . import vjp_deltanet, vjp_mamba2
from .backward_counts import Counts, Saves

FILES = (vjp_mamba2, vjp_deltanet)
TRAINABLE = ("attention", "none", *(f.MIXER for f in FILES))


def mixer_counts(s: Stage, st: list[Stage], i: int) -> Counts | None:
    """Stage s (st[i]): its backward FLOPs as its rule counts them; None: train/backward.py's
    generic rule (a linear layer's dX and dW, a product of two activations' dA and dB)."""
    for f in FILES:
        if (c := f.backward_counts(s, st, i)) is not None:
            return c
    return None


def mixer_saved(s: Stage, st: list[Stage], i: int, act: str) -> Saves | None:
    """Stage s (st[i]): the tensors autograd saves for it by its mixer's rule; None: not a
    mixer's own stage (train/saved.py's rules: its projections are linear layers)."""
    for f in FILES:
        if (x := f.saved(s, st, i, act)) is not None:
            return x
    return None
