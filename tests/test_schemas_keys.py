"""Issue 25 item 4: every command's --json has a schema, and every key of the real output is in
it with a description; the schema validates the output (extra keys forbidden).

The walk follows the JSON Schema that `shapecalc schema NAME` prints: each key of a document must
be a property with a non-empty description; a dict of data keys (additionalProperties: a dtype
per role, bytes per layer kind) is described once, by the key that holds it.
"""

from __future__ import annotations

import json

import pytest

GPU = "H100-SXM"
SERVE = ["--gpu", GPU, "--prompt-tokens", "512", "--output-tokens", "32", "--requests", "30",
         "--slo", "ttft=1s,itl=50ms"]
# (schema, argv): a stateful-mixer preset, a DSA one, a MoE one with every optional section
CASES = [
    ("trace", ["trace", "--preset", "qwen3-30b-a3b", "--tp", "2", "--pp", "2", "--seq", "64",
               "--per-rank", "--json"]),
    ("trace", ["trace", "--preset", "deepseek-v3.2-exp", "--seq", "64", "--json"]),
    ("trace", ["trace", "--preset", "nemotron-nano-9b-v2", "--seq", "64", "--json"]),
    ("trace", ["trace", "--preset", "gpt-oss-20b-mxfp4", "--seq", "64", "--json"]),
    ("trace", ["trace", "--preset", "llama4-scout", "--seq", "64", "--json"]),
    ("fit", ["fit", "--preset", "llama3-8b", "--gpu", GPU, "--price", "2", "--json"]),
    ("fit", ["fit", "--preset", "nemotron-nano-9b-v2", "--gpu", GPU, "--json"]),
    ("fit", ["fit", "--preset", "deepseek-v3.2-exp", "--gpu", GPU, "--json"]),
    ("compare", ["compare", "llama3-8b@tp=2,kv_dtype=fp8", "nemotron-nano-9b-v2", "--gpu", GPU,
                 "--price", "2", "--json"]),
    ("sweep_row", ["sweep", "llama3-8b", "nemotron-nano-9b-v2", "--gpu", GPU, "--price", "2",
                   "--format", "jsonl"]),
    ("train", ["train", "--preset", "llama3-8b", "--seq", "64", "--gpu", GPU, "--json"]),
    ("train", ["train", "--preset", "qwen3-30b-a3b", "--seq", "64", "--tp", "2", "--pp", "2",
               "--ep", "2", "--dp", "2", "--cp", "2", "--virtual-stages", "2", "--grad-accum",
               "4", "--zero", "3", "--recompute", "torch", "--train-tokens", "1e9", "--gpu",
               GPU, "--json"]),
    ("train", ["train", "--preset", "nemotron-nano-9b-v2", "--seq", "64", "--zero", "1",
               "--json"]),
    # a framework's own count, fp8 and the efficiency block (memory.framework, training.fp8,
    # time.efficiency)
    ("train", ["train", "--preset", "qwen3-30b-a3b", "--seq", "64", "--pp", "2", "--ep", "2",
               "--dp", "4", "--zero", "3", "--framework", "torchtitan", "--recompute",
               "selective", "--fp8", "torchao-tensor", "--compile", "--gpu", GPU, "--json"]),
    ("verify", ["verify", "--json"]),
    ("verify", ["verify", "--config", "{MAMBA}", "--json"]),
    ("train_search", ["train", "--preset", "llama3-8b", "--seq", "64", "--gpu", GPU, "--search",
                      "--gpus", "8", "--global-batch", "8", "--price", "2", "--json"]),
    ("train", ["train", "--preset", "llama3-8b", "--seq", "64", "--lora-rank", "16",
               "--lora-base", "nf4", "--paged-optimizer", "--gpu", GPU, "--json"]),
    ("verify_train", ["verify", "--train", "--json"]),
    ("verify_train", ["verify", "--train", "--config", "{MAMBA}", "--json"]),
    ("explain", ["explain", "--json"]),
    ("explain", ["explain", "--scan", "--json"]),
    ("explain", ["explain", "--example", "topk", "--json"]),
    ("serve", ["serve", "--preset", "llama3-8b", "--rate", "2", *SERVE, "--json"]),
    ("serve", ["serve", "--preset", "nemotron-nano-9b-v2", "--rate", "2", *SERVE, "--json"]),
    ("serve_find_rate", ["serve", "--preset", "llama3-8b", *SERVE, "--max-batched-tokens",
                         "1024", "--find-rate", "--json"]),
    ("serve_find_gpus", ["serve", "--preset", "llama3-8b", "--rate", "2", *SERVE,
                         "--max-batched-tokens", "1024", "--find-gpus", "--json"]),
    ("serve", ["serve", "--preset", "llama3-8b", "--rate", "2", *SERVE, "--pd", "1:2",
               "--json"]),
    ("serve_find_pd", ["serve", "--preset", "llama3-8b", "--rate", "2", *SERVE, "--find-pd",
                       "--json"]),
]


def _resolve(schema: dict, root: dict) -> dict:
    while "$ref" in schema:
        ref = schema["$ref"].rpartition("/")[2]
        schema = {**root["$defs"][ref], **{k: v for k, v in schema.items() if k != "$ref"}}
    return schema


def _branch(schema: dict, root: dict, doc: object) -> dict:
    """The anyOf branch a value takes (an object, an array or a scalar)."""
    schema = _resolve(schema, root)
    for alt in schema.get("anyOf", ()):
        alt = _resolve(alt, root)
        t = alt.get("type")
        if (isinstance(doc, dict) and t == "object") or (isinstance(doc, list) and t == "array"):
            return alt
    return schema


def undescribed(doc: object, schema: dict, root: dict, path: str = "") -> list[str]:
    """Paths of the keys of doc that its schema does not name or does not describe."""
    schema = _branch(schema, root, doc)
    bad: list[str] = []
    if isinstance(doc, dict):
        props = schema.get("properties")
        if props is None:  # a dict of data keys: its values follow additionalProperties
            extra = schema.get("additionalProperties")
            if not isinstance(extra, dict):
                return [f"{path} (no properties)"] if doc else []
            for k, v in doc.items():
                bad += undescribed(v, extra, root, f"{path}.{k}")
            return bad
        for k, v in doc.items():
            p = f"{path}.{k}" if path else k
            extra = schema.get("additionalProperties")
            if k not in props and isinstance(extra, dict):  # keys named by the data (explain)
                if not str(extra.get("description", "")).strip():
                    bad.append(f"{p} (no description)")
                bad += undescribed(v, extra, root, p)
                continue
            if k not in props:
                bad.append(f"{p} (not in the schema)")
                continue
            sub = props[k]
            if not str(_resolve(sub, root).get("description", "")).strip() \
                    and not str(sub.get("description", "")).strip():
                bad.append(f"{p} (no description)")
            bad += undescribed(v, sub, root, p)
    elif isinstance(doc, list):
        items = schema.get("items")
        if isinstance(items, dict):
            for v in doc:
                bad += undescribed(v, items, root, f"{path}[]")
    return bad


def _run(argv: list[str]) -> list[object]:
    import contextlib
    import io
    import sys

    from shapecalc.cli import main

    buf, old = io.StringIO(), sys.argv
    sys.argv = ["shapecalc", *argv]
    try:
        with contextlib.redirect_stdout(buf):
            try:
                main()
            except SystemExit as e:
                assert e.code in (0, None, 1), (argv, e.code)  # 1: a negative verdict
    finally:
        sys.argv = old
    text = buf.getvalue()
    return [json.loads(x) for x in text.splitlines() if x.strip()] if argv[0] == "sweep" \
        else [json.loads(text)]


# a tiny Mamba-2 hybrid (tests/test_mixers.py's), small enough for verify to run whole
MAMBA = dict(name="tiny-mamba", vocab_size=64, d_model=32, n_layers=3, n_heads=4, n_kv_heads=2,
             head_dim=8, d_ff=48, ffn="relu2", norm="rmsnorm", positions="none",
             mixer_types=["mamba2", "attention", "none"], ffn_types=["none", "none", "dense"],
             ssm_heads=4, ssm_head_dim=8, ssm_groups=2, ssm_state=6, conv_kernel=4,
             scan_chunk=8)


def _check(name: str, doc: object) -> None:
    from shapecalc.cli.schemas import models, schema

    models()[name].model_validate(doc)
    whole = schema(name)
    assert undescribed(doc, whole, whole) == [], name


@pytest.mark.parametrize("name, argv", CASES, ids=[" ".join(a[:3]) for _, a in CASES])
def test_every_key_is_in_the_schema_and_described(name, argv, tmp_path):
    config = tmp_path / "mamba.json"
    config.write_text(json.dumps(MAMBA))
    docs = _run([str(config) if a == "{MAMBA}" else a for a in argv])
    for doc in docs:
        _check(name, doc)
        if name == "explain":  # each matrix's key is a step the rules explain
            steps = set(doc) - {"example", "shapes", "rules"}
            assert steps and all(doc["rules"].get(k) for k in steps)
            assert set(doc["shapes"]) == steps


def test_verify_against_transformers_is_in_its_schema():
    """From a stored meta-device record, one check failing (first_difference, detail filled)."""
    from tests.test_ux_readme_keys import _against

    _check("verify_against", _against())


def test_every_output_has_a_schema():
    from shapecalc.cli.schemas import SCHEMAS

    covered = {name for name, _ in CASES} | {"verify_against", "config", "workload"}
    assert covered == set(SCHEMAS)


def test_the_walk_finds_an_undescribed_or_unknown_key():
    from shapecalc.cli.schemas import schemas

    schema = schemas()["serve"]
    assert undescribed({"nope": 1}, schema, schema) == ["nope (not in the schema)"]
    bare = json.loads(json.dumps(schema))
    del bare["$defs"]["ServeSlo"]["properties"]["itl_s"]["description"]
    assert undescribed({"slo": {"itl_s": 1.0}}, bare, bare) == ["slo.itl_s (no description)"]


def test_schema_lists_and_prints(cli):
    from shapecalc.cli.schemas import SCHEMAS

    r = cli("schema")
    assert r.code == 0 and [line.split()[0] for line in r.out.splitlines()[:len(SCHEMAS)]] \
        == list(SCHEMAS)
    assert set(cli("schema", "--json").json()) == set(SCHEMAS)
    assert set(cli("schema", "--all").json()) == set(SCHEMAS)
    one = cli("schema", "train").json()
    assert one["title"] == "TrainOut" and one["properties"]["time"]["description"]
    r = cli("schema", "serve_find")
    assert r.code == 2 and "serve_find_rate" in r.err and r.out == ""
