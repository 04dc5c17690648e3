"""No silent guesses: each family entry reads exactly the keys its mechanisms declare
(hf_families.READS), and a config key that changes shapes or costs, and that the entry does not
read, is refused in one line naming the key (hf_keys.audit)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from shapecalc.inputs import hf_keys
from shapecalc.inputs.hf import _HF, SUPPORTED, load_hf_config, read_family
from shapecalc.inputs.hf_families import FAMILIES, READS
from shapecalc.model.config import ShapecalcError

DATA = Path(__file__).parent / "data"
HF = DATA / "hf"


def _text_model(cfg: dict) -> dict:
    """A multimodal config's text model, as load_hf_config reads it (Llama 4's text_config)."""
    text = cfg.get("text_config")
    if not isinstance(text, dict):
        return cfg
    return {**{k: cfg[k] for k in ("tie_word_embeddings",) if k in cfg}, **text}


REAL = {p.stem: _text_model(json.loads(p.read_text())) for p in sorted(HF.glob("*.json"))
        if p.name != "published.json"}
# the tiny models measured with torch: each case's config as transformers 5.x writes it
CASES = {f"{ref}:{c['name']}": c["hf_config"]
         for ref in ("flop_reference", "moe_reference", "alibi_reference",
                     "llama4_reference", "classic_reference", "gemma_reference",
                     "mixers_reference", "mixers_reference_conv", "mixers_reference_ssm",
                     "mixers_reference_delta", "mixers_reference_zaya",
                     "mixers_reference_inkling")
         for c in json.loads((DATA / f"{ref}.json").read_text())["cases"]}
ALL = {**REAL, **CASES}
# one real config per family, the base the probes change
BASE = {mt: next(c for c in REAL.values() if c["model_type"] == mt) for mt in SUPPORTED}
# switches that make a reader look at the keys it reads only when a feature is on
SWITCH_ON = {
    "qwen2": {"use_sliding_window": True, "sliding_window": 4096, "max_window_layers": 0},
    "qwen3": {"use_sliding_window": True, "sliding_window": 4096, "max_window_layers": 0},
    "qwen2_moe": {"use_sliding_window": True, "sliding_window": 4096},
    "qwen3_moe": {"use_sliding_window": True, "sliding_window": 4096},
    "falcon": {"new_decoder_architecture": True, "num_ln_in_parallel_attn": 1},
    "smollm3": {"use_sliding_window": True, "sliding_window": 4096},
    # K-EXAONE's config gives layer_types (its "LLLG" pattern is read only without them)
    "exaone_moe": {"layer_types": None, "sliding_window_pattern": 4},
    # Falcon-H1's inner width is mamba_expand·D only where mamba_d_ssm is null
    "falcon_h1": {"mamba_d_ssm": None, "mamba_d_head": "auto"},
    # Gemma 4: global_head_dim only without per_layer_config, num_global_key_value_heads only
    # with attention_k_eq_v (as Gemma4TextConfig folds them)
    "gemma4_text": {"per_layer_config": None, "attention_k_eq_v": True},
    "gemma4_unified_text": {"per_layer_config": None, "attention_k_eq_v": True},
}


def _read(cfg: dict) -> set[str]:
    h = _HF(cfg)
    read_family(h, cfg["model_type"])
    return h.read


@pytest.mark.parametrize("name", sorted(ALL))
def test_every_stored_config_imports_and_reads_only_declared_keys(name, tmp_path):
    cfg = ALL[name]
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    load_hf_config(p)  # the audit passes: nothing shape-changing is left unread
    assert _read(cfg) <= READS[cfg["model_type"]]


def test_reads_declares_exactly_what_the_readers_read():
    """READS is no wider than the readers: every declared key is read by some stored config (or
    by it with its family's feature switched on), so no key is let through unread."""
    assert set(SUPPORTED) <= set(READS)
    read: dict[str, set[str]] = defaultdict(set)
    for cfg in ALL.values():
        mt = cfg["model_type"]
        read[mt] |= _read(cfg) | _read({**cfg, **SWITCH_ON.get(mt, {})})
    assert {mt: set(keys) for mt, keys in READS.items()} == dict(read)


def _probe(key: str, spec: hf_keys.Key) -> dict:
    """Config entries giving `key` a value that changes something."""
    values = {
        "layer_types": ["sliding_attention", "full_attention"], "no_rope_layers": [1, 1, 1, 0],
        "mlp_only_layers": [0], "moe_layers": [1], "position_embedding_type": "alibi",
        "rotary_pct": 0.25, "partial_rotary_factor": 0.5, "logit_scale": 0.0625,
        "attention_multiplier": 0.015625, "embedding_multiplier": 12.0, "residual_multiplier": 0.22,
        "logits_scaling": 8.0, "max_window_layers": 3, "mlp_layer_types": ["dense", "sparse"],
    }  # fmt: skip
    if key.startswith("rope_"):
        outer, inner = key.split(".")
        return {outer: {"rope_type": "default", "rope_theta": 10000.0, inner: 0.5}}
    value = values.get(key, True if False in spec.neutral else 3)
    extra = {"use_sliding_window": True} if key == "max_window_layers" else {}
    return {key: value, **extra}


@pytest.mark.parametrize("mt", sorted(SUPPORTED))
def test_each_unread_shape_key_is_refused_naming_it(mt):
    """SHAPE_KEYS × families: a value that changes something, in a key the reader does not read,
    is refused naming that key (or the switch that turns it on), in one line."""
    base, reads = BASE[mt], READS[mt] | FAMILIES[mt].ignored
    unread = [k for k in hf_keys.SHAPE_KEYS if k not in reads]
    assert len(unread) > 40  # the list is long for every family
    for key in unread:
        probe = _probe(key, hf_keys.SHAPE_KEYS[key])
        # a nested probe joins the base's own rope dict (Ministral 3 reads other keys of it)
        cfg = {**base, **{k: {**base[k], **v} if isinstance(v, dict) and
                          isinstance(base.get(k), dict) else v for k, v in probe.items()}}
        assert not hf_keys.SHAPE_KEYS[key].is_neutral(probe[key.split(".")[0]]
                                                      if "." in key else probe[key], cfg), key
        with pytest.raises(ShapecalcError) as info:
            read_family(_HF(cfg), mt)
        err = info.value
        assert err.field.split(".")[0] in probe and err.field in hf_keys.SHAPE_KEYS, (key, err)
        assert "\n" not in str(err) and repr(mt) in err.reason, err


@pytest.mark.parametrize("mt", sorted(SUPPORTED))
def test_neutral_values_are_accepted_and_change_nothing(mt):
    base = BASE[mt]
    want = read_family(_HF(base), mt)
    reads = READS[mt]
    for key, spec in hf_keys.SHAPE_KEYS.items():
        if key in reads or "." in key:
            continue
        for value in spec.neutral:
            assert read_family(_HF({**base, key: value}), mt) == want, (key, value)
    # neutral because of what else the config says
    d_h = {"gpt2": 64, "falcon": 64, "opt": 64}.get(mt)
    if d_h:
        same = {"head_dim": d_h, "query_pre_attn_scalar": d_h, "attention_multiplier": d_h**-0.5,
                "rotary_dim": d_h, "num_key_value_heads": base.get("n_head")
                or base.get("num_attention_heads")}
        same = {k: v for k, v in same.items() if k not in reads}
        assert read_family(_HF({**base, **same}), mt) == want
    off = {"use_sliding_window": False, "sliding_window": 4096, "max_window_layers": 3,
           "layer_types": ["full_attention"] * 4, "no_rope_layers": [1, 1],
           "rope_parameters": {"rope_type": "default", "partial_rotary_factor": 1.0}}
    # (a family that reads the nested factor takes it: transformers prefers it to rotary_pct)
    # (…, and one that reads other keys of rope_parameters needs them: Ministral 3)
    off = {k: v for k, v in off.items()
           if k not in reads and not any(r.startswith(f"{k}.") for r in reads)}
    assert read_family(_HF({**base, **off}), mt) == want


def test_is_neutral_tells_zero_from_false():
    bias = hf_keys.SHAPE_KEYS["attention_bias"]
    assert bias.is_neutral(False, {}) and bias.is_neutral(None, {})
    assert not bias.is_neutral(True, {}) and not bias.is_neutral(0, {})
    rot = hf_keys.SHAPE_KEYS["partial_rotary_factor"]
    assert rot.is_neutral(1, {}) and rot.is_neutral(1.0, {}) and not rot.is_neutral(True, {})
    assert not rot.is_neutral(0.5, {})
    head = hf_keys.SHAPE_KEYS["head_dim"]
    assert head.is_neutral(128, {"hidden_size": 4096, "num_attention_heads": 32})
    assert not head.is_neutral(256, {"hidden_size": 4096, "num_attention_heads": 32})


def _load(tmp_path, cfg):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    return load_hf_config(p)


def test_relabelled_configs_are_refused(tmp_path):
    """Configs of one family under another's model_type: transformers would build a different
    model (Mixtral as Mistral loses 39 B parameters), shapecalc refuses naming the key."""
    cases = [  # (config, its new model_type, keys added, the key named)
        ("mixtral-8x7b", "mistral", {}, "num_local_experts"),
        ("mixtral-8x7b", "llama", {}, "num_local_experts"),
        ("qwen3-30b-a3b", "qwen3", {}, "num_experts"),
        ("qwen1.5-moe-a2.7b", "qwen3_moe", {}, "shared_expert_intermediate_size"),
        ("gpt-oss-20b", "llama", {}, "num_local_experts"),
        ("mistral-7b", "llama", {}, "sliding_window"),
        ("phi3-mini-4k", "llama", {}, "sliding_window"),
        ("falcon-7b", "phi3", {"intermediate_size": 18176}, "parallel_attn"),
        ("qwen3-8b", "qwen2", {"attention_bias": True}, "attention_bias"),  # qwen2 has none
        ("gpt2", "gpt2", {"num_key_value_heads": 4}, "num_key_value_heads"),  # GPT-2: no GQA
        ("llama3-8b", "llama", {"use_qk_norm": True}, "use_qk_norm"),  # Llama 4's q/k norms
    ]
    for stem, mt, extra, key in cases:
        cfg = {**REAL[stem], "model_type": mt}
        if stem in ("qwen3-8b", "gpt2", "llama3-8b"):
            _load(tmp_path, cfg)  # fine without `extra`
        with pytest.raises(ShapecalcError) as info:
            _load(tmp_path, {**cfg, **extra})
        assert info.value.field == key, (stem, mt, info.value)
        assert f"model_type {mt!r}" in info.value.reason
    with pytest.raises(ShapecalcError) as info:
        _load(tmp_path, {**REAL["mixtral-8x7b"], "model_type": "mistral"})
    msg = "num_local_experts: 8 sets experts (a Mixture-of-Experts FFN), which shapecalc does not "
    assert str(info.value).startswith(msg + "read for model_type 'mistral'")


def test_nested_partial_rotary_is_audited(tmp_path):
    cfg = {**REAL["phi3-mini-4k"], "rope_parameters": {"rope_type": "default",
                                                        "partial_rotary_factor": 0.75}}
    with pytest.raises(ShapecalcError) as info:
        _load(tmp_path, cfg)
    assert info.value.field == "rope_parameters.partial_rotary_factor"
    per_type = {"full_attention": {"rope_type": "default", "partial_rotary_factor": 0.25}}
    with pytest.raises(ShapecalcError):
        _load(tmp_path, {**REAL["llama3-8b"], "rope_scaling": per_type})


def test_cli_refuses_an_unmodelled_key_in_one_line(tmp_path):
    """The command line: exit 2, one line on stderr naming the key, nothing on stdout."""
    cfg = {**REAL["llama3-8b"], "attn_logit_softcapping": 50.0}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    r = subprocess.run([sys.executable, "-m", "shapecalc", "trace", "--hf-config", str(p)],
                       capture_output=True, text=True, cwd=Path(__file__).parent.parent)
    assert r.returncode == 2 and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "attn_logit_softcapping" in lines[0] and "'llama'" in lines[0]
