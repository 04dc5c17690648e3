"""Measuring transformers' own model of a config.json: the optional extra `shapecalc[reference]`
(torch and transformers, pinned in pyproject.toml).

`measure` holds the counting code (parameters per module on the meta device, FLOPs per module
with FlopCounterMode over a prefill and one decode step, the bytes of transformers' cache), shared
by `verify --against transformers` and tests/torch_reference. It imports torch, so nothing on
shapecalc's start-up path imports it: callers call `require()` and import `measure` inside the
command. `modules` (stdlib only) says which transformers module each shapecalc stage is, and
`stored` where a preset's config.json is.
"""

from __future__ import annotations

from ..model.errors import ShapecalcError

INSTALL = "pip install 'shapecalc[reference]'"
# the versions the extra pins, and the ones shapecalc's conventions were checked against
PINNED = {"torch": "2.13.0", "transformers": "5.24.0"}


def require(field: str = "against") -> None:
    """Refuse in one line, naming what to install, when torch or transformers is missing."""
    missing = []
    for name in PINNED:
        try:
            __import__(name)
        except ImportError:
            missing.append(name)
    if missing:
        raise ShapecalcError(field, f"needs {' and '.join(missing)}, which are not installed: "
                             f"{INSTALL}")
