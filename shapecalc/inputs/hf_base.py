"""What every Hugging Face family entry is made of: the reader that reads one config.json's keys
(absent keys take the family's config-class defaults, aliases as the class's attribute_map names
them), the `Family` record of the table (hf_families.py), and `mechanism`, the mark that says
which keys a mechanism's reader reads.

transformers makes a family a config class (defaults, an attribute map) and a modeling file built
from shared parts; an entry here is the same: its defaults, its aliases, the mechanisms its model
is built from (each a function over the reader and the fields read so far), the keys it refuses
and why, and the keys its class ignores. The entries import this module and the mechanisms; this
module imports neither.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..model.config import MAX_LAYERS, ShapecalcError
from ..model.record import INT_MAX

Fields = dict[str, Any]
_GELU = {"gelu", "gelu_new", "gelu_pytorch_tanh", "gelu_fast", "gelu_python", "gelu_accurate"}
_SILU = {"silu", "swish"}
_NO_DEFAULT: Any = object()


class Mechanism:
    """A part a family's model is built from: `read(h, f)` adds the ModelConfig fields it sets to
    `f`, reading only the config keys in `keys` (tests/test_hf_keys.py holds it to them)."""

    def __init__(self, fn: Callable[[HF, Fields], None], keys: frozenset[str]):
        self.read, self.keys, self.name = fn, keys, fn.__name__

    def __repr__(self) -> str:
        return f"mechanism {self.name}"


def mechanism(*keys: str) -> Callable[[Callable[[HF, Fields], None]], Mechanism]:
    """Mark a function `(h, f) -> None` as a mechanism reading `keys` (a key read only through
    an alias the family declares counts under its canonical name and each alias)."""
    return lambda fn: Mechanism(fn, frozenset(keys))


def layout(fn: Callable[[HF], Fields], *keys: str) -> Mechanism:
    """A family's whole layout read by one function: the families that share no part with the
    others (GPT-2, Falcon, OPT, BLOOM, MPT, …)."""
    def read(h: HF, f: Fields) -> None:
        f.update(fn(h))
    read.__name__ = fn.__name__.lstrip("_")
    return Mechanism(read, frozenset(keys))


@dataclass(frozen=True)
class Refusal:
    """A key whose value the family's modeling code cannot take: `ok` lists the values it can
    (absent counts as `default`), `why` says why another is refused ({value!r} is filled in)."""

    ok: tuple[Any, ...]
    why: str
    default: Any = None


@dataclass(frozen=True)
class Family:
    """One row of the table: a model_type as transformers 5.24's config class and modeling file
    define it."""

    model_type: str
    what: str  # one line for the README's table of families
    mechanisms: tuple[Mechanism, ...]
    defaults: Mapping[str, Any] = field(default_factory=dict)  # the config class's defaults
    # attribute_map: each canonical key → the other names the class reads it under, in the order
    # transformers looks (the first given wins)
    aliases: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    fixed: Mapping[str, Any] = field(default_factory=dict)  # fields its modeling code sets
    refuse: Mapping[str, Refusal] = field(default_factory=dict)
    ignored: frozenset[str] = frozenset()  # keys its class ignores although they look meaningful
    # widths the class defaults that a text_config may leave out (Gemma 3's); read as if given
    widths: Mapping[str, Any] = field(default_factory=dict)

    @property
    def reads(self) -> frozenset[str]:
        """Every key this family's reader may read."""
        keys = set(self.refuse)
        for m in self.mechanisms:
            keys |= m.keys
        for k in list(keys):
            keys.update(self.aliases.get(k, ()))
        return frozenset(keys)


# keys whose kind is the same in every family that has them: a count (a positive integer; `true`
# is not 1, "2048" is not a number) or a list; checked wherever they are read, so no reader
# computes with a list or a string (OPT's max_position_embeddings + 2)
COUNT_KEYS = frozenset((
    "max_position_embeddings", "n_positions", "max_seq_len", "num_hidden_layers", "hidden_size",
    "intermediate_size", "num_attention_heads", "num_key_value_heads", "vocab_size", "head_dim",
    "ffn_dim", "n_embd", "n_layer", "n_head", "n_inner", "rotary_dim"))
# the layer count: readers list each layer's kind from it, so it is bounded as the model is
LAYER_KEYS = frozenset(("num_hidden_layers", "n_layer"))
# counts where 0 says "none" (num_experts 0: a dense model; a sliding_window of 0 is off)
ZERO_KEYS = frozenset(("sliding_window", "num_experts", "num_local_experts", "n_routed_experts",
                       "num_experts_per_tok"))
LIST_KEYS = frozenset(("layer_types",))


def _bounded_count(key: str, value: Any) -> None:
    """A count at most what a model may hold (readers build lists and products from it)."""
    if type(value) is not int:
        return
    most = MAX_LAYERS if key in LAYER_KEYS else INT_MAX
    if value > most:
        raise ShapecalcError(key, f"{value:,} is more than the {most:,} shapecalc takes")


def check_kind(key: str, value: Any) -> None:
    """One line for a value of the wrong kind under a key of fixed kind (None: not given)."""
    if value is None:
        return
    if key in COUNT_KEYS and (type(value) is not int or value < 1):
        raise ShapecalcError(key, f"must be a positive integer, not {value!r}")
    _bounded_count(key, value)
    if key in ZERO_KEYS and (type(value) is not int or value < 0):
        raise ShapecalcError(key, f"must be an integer ≥ 0, not {value!r}")
    if key in LIST_KEYS and not isinstance(value, list):
        raise ShapecalcError(key, f"must be a list, not {value!r}")


class HF:
    """Reads keys of one config.json for one family; absent keys take the family's class
    default. Every key looked at is recorded in `read`."""

    def __init__(self, cfg: dict[str, Any], family: Family | None = None):
        self.cfg = cfg
        self.family = family
        self.read: set[str] = set()
        self.order: list[str] = []  # the keys as read (wrong_kind's suspects)

    def names(self, key: str) -> tuple[str, ...]:
        """`key` and the aliases its family's attribute map gives it."""
        return (key, *(self.family.aliases.get(key, ()) if self.family else ()))

    def default(self, key: str, fallback: Any = None) -> Any:
        fam = self.family
        return fam.defaults[key] if fam is not None and key in fam.defaults else fallback

    def need(self, key: str, symbol: str) -> Any:
        """A count or width the config must give (under `key` or an alias)."""
        keys = self.names(key)
        self.read.update(keys)
        self.order += keys
        for k in keys:
            if self.cfg.get(k) is not None:
                value = self.cfg[k]
                # every needed key is a count or a width: readers compute with it (D // H, 4·D)
                if type(value) is not int or value < 1:
                    raise ShapecalcError(k, f"{symbol} must be a positive integer, not {value!r}")
                _bounded_count(k, value)
                return value
        raise ShapecalcError(key, f"missing from config.json (needed for {symbol})")

    def get(self, key: str, fallback: Any = _NO_DEFAULT) -> Any:
        """The key's value, else the family's class default, else `fallback` (None). A given
        value must be of the default's kind: a flag true or false (`bool("false")` is True), a
        number a number (not `true`)."""
        self.read.add(key)
        self.order.append(key)
        default = self.default(key, None if fallback is _NO_DEFAULT else fallback)
        if key not in self.cfg:
            return default
        value = self.cfg[key]
        if isinstance(default, bool) and not isinstance(value, bool):
            raise ShapecalcError(key, f"must be true or false, not {value!r}")
        number = isinstance(default, (int, float)) and not isinstance(default, bool)
        if number and value is not None and (
                isinstance(value, bool) or not isinstance(value, (int, float))):
            raise ShapecalcError(key, f"must be a number, not {value!r}")
        # a list or table where the class default is one (a name may stand for a number:
        # mamba_dt_rank "auto" or 256)
        for kind, what in ((list, "a list"), (dict, "a table of fields")):
            if isinstance(default, kind) and value is not None and not isinstance(value, kind):
                raise ShapecalcError(key, f"must be {what}, not {value!r}")
        check_kind(key, value)
        return value

    def one_of(self, key: str, fallback: Any = _NO_DEFAULT) -> Any:
        """The value of whichever of `key` and its aliases the config gives (they name one
        attribute; two that disagree are refused), else the default."""
        given = [(k, self.get(k)) for k in self.names(key)]
        given = [(k, v) for k, v in given if k in self.cfg and v is not None]
        for k, v in given[1:]:
            if v != given[0][1]:
                raise ShapecalcError(k, f"{v} contradicts {given[0][0]}={given[0][1]}")
        return given[0][1] if given else self.get(key, fallback)

    def first(self, key: str) -> Any:
        """The value of the first of `key` and its aliases the config holds (null included),
        else the default: attribute_map's reading, where the names are not checked against
        each other."""
        keys = self.names(key)
        self.read.update(keys)
        return self.get(next((k for k in keys if k in self.cfg), key))

    def act(self, key: str, gated: bool) -> str:
        """The FFN's activation, from `key` (default: the family's)."""
        name = self.get(key)
        if not isinstance(name, str):
            raise ShapecalcError(key, f"must be an activation's name, not {name!r}")
        if gated and name in _SILU:
            return "swiglu"
        if name in _GELU:
            return "geglu" if gated else "gelu"
        if not gated and name == "relu":
            return "relu"
        ok = "silu, swish, gelu variants" if gated else "relu, gelu variants"
        kind = "a gated FFN" if gated else "an FFN"
        raise ShapecalcError(key, f"{name!r} is not supported for {kind}; supported: {ok}")

    def wrong_kind(self, err: Exception) -> ShapecalcError:
        """The error for a reader that failed on a value: the keys it read whose value is null,
        a list or a table (where readers compute) or of another kind than the family's default
        are suspects; the last one read is named."""
        def odd(k: str) -> bool:
            v, d = self.cfg.get(k), self.default(k)
            if v is None:  # given as null
                return True
            return not same_kind(v, d) if d is not None else isinstance(v, (list, dict))

        suspects = [k for k in self.order if k in self.cfg and odd(k)]
        nulls = [k for k in suspects if self.cfg[k] is None]  # a null given: the likeliest
        suspects = nulls or suspects
        key = suspects[-1] if suspects else (self.order[-1] if self.order else "hf-config")
        shown = repr(self.cfg.get(key))
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        return ShapecalcError(key, f"{shown} is not a value shapecalc can read here "
                              f"({' '.join(str(err).split())[:80]})")

    def number(self, key: str, fallback: Any = _NO_DEFAULT) -> float:
        """A finite number the reader computes with (a multiplier): null is not one."""
        import math

        v = self.get(key, fallback)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ShapecalcError(key, f"must be a finite number, not {v!r}")
        return float(v)

    def int_list(self, key: str) -> list[int] | None:
        v = self.get(key)
        if v is None:
            return None
        if not isinstance(v, list) or not all(isinstance(x, int) for x in v):
            raise ShapecalcError(key, f"must be a list of integers, not {v!r}")
        return v

    def refusals(self) -> None:
        """The family's refused values, each named by its key."""
        assert self.family is not None
        for key, r in self.family.refuse.items():
            value = self.get(key, r.default)
            if not any(same(value, ok) for ok in r.ok):
                raise ShapecalcError(key, r.why.format(value=value))


def same_kind(a: Any, b: Any) -> bool:
    """Both numbers (not bools), or both of one type."""
    num = (int, float)
    if isinstance(a, num) and isinstance(b, num):
        return isinstance(a, bool) == isinstance(b, bool)
    return type(a) is type(b)


def same(a: Any, b: Any) -> bool:
    """Equal and of one kind: 0 is not False, but 1 is 1.0."""
    num = (int, float)
    if isinstance(a, num) and isinstance(b, num) and not isinstance(a, bool) \
            and not isinstance(b, bool):
        return a == b
    return type(a) is type(b) and a == b


def positive_step(h: HF, key: str) -> int:
    """An every-k-th-layer step (MoE layers): a positive integer."""
    step = h.get(key, 1)
    if not isinstance(step, int) or step < 1:
        raise ShapecalcError(key, f"must be a positive integer, not {step!r}")
    return step
