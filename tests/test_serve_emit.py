"""`serve --emit`: every flag printed is one the engine's parser declares (tests/data/
engine_flags.json, from its source at the commit named), the values are the plan's, and what an
engine cannot express is refused naming the flag."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from shapecalc.serve.emit import _check

DATA = Path(__file__).parent / "data"
FLAGS = json.loads((DATA / "engine_flags.json").read_text())
EAGLE3 = str(DATA / "eagle3-llama3.1-8b-config.json")


def _commands(text: str) -> list[list[str]]:
    """The shell commands of --emit's output (comments and the heredoc's YAML aside)."""
    out, yaml = [], False
    for line in text.replace("\\\n", " ").splitlines():
        if line.startswith("cat > "):
            yaml = True
            continue
        if yaml:
            yaml = line != "EOF"
            continue
        if line and not line.startswith("#"):
            out.append(shlex.split(line.rstrip(" &")))
    return out


def _yaml_keys(text: str) -> set[str]:
    keys, inside, parent = set(), False, ""
    for line in text.splitlines():
        if line.startswith("cat > "):
            inside = True
            continue
        if line == "EOF":
            inside = False
        if not inside or ":" not in line:
            continue
        key = line.split(":", 1)[0]
        if line.startswith("  "):
            keys.add(f"{parent}.{key.strip()}")
        else:
            parent = key
            keys.add(key)
    return keys


def _flags(cmd: list[str]) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for i, tok in enumerate(cmd):
        if tok.startswith("--"):
            nxt = cmd[i + 1] if i + 1 < len(cmd) else None
            out[tok] = None if nxt is None or nxt.startswith("--") else nxt
    return out


SPEC = ["--draft", "eagle3", "--draft-config", EAGLE3, "--spec-k", "3"]


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm", "dynamo"])
def test_every_emitted_flag_is_the_engines_own(cli, engine):
    r = cli("serve", "--preset", "llama3.1-8b", "--gpu", "h100-sxm", "--requests", "2",
            "--prompt-tokens", "64", "--output-tokens", "8", "--replicas", "2",
            "--max-num-seqs", "64", "--max-batched-tokens", "2048", *SPEC, "--emit", engine)
    assert r.code == 0, r.err
    names = FLAGS["vllm" if engine == "dynamo" else engine]
    known = set((FLAGS["vllm"] if engine == "dynamo" else names)["flags"])
    cmds = _commands(r.out)
    engine_cmds = [c for c in cmds if "dynamo.frontend" not in c]
    assert engine_cmds
    for cmd in engine_cmds:
        flags = _flags(cmd)
        assert set(flags) <= known, set(flags) - known
    f = _flags(engine_cmds[0])
    if engine in ("vllm", "dynamo"):
        assert f["--tensor-parallel-size"] == "1" and f["--max-num-seqs"] == "64"
        assert f["--max-num-batched-tokens"] == "2048" and f["--block-size"] == "16"
        cfg = json.loads(f["--speculative-config"] or "")
        assert set(cfg) <= set(FLAGS["vllm"]["speculative_config_keys"])
        assert cfg["method"] in FLAGS["vllm"]["speculative_methods"]["values"]
        assert cfg["method"] == "eagle3" and cfg["num_speculative_tokens"] == 3
        assert f["--kv-cache-dtype"] in FLAGS["vllm"]["choices"]["--kv-cache-dtype"]
        if engine == "dynamo":  # one worker a replica, each on its own GPU
            assert len(engine_cmds) == 2 and engine_cmds[1][0] == "CUDA_VISIBLE_DEVICES=1"
    elif engine == "sglang":
        assert f["--tp-size"] == "1" and f["--max-running-requests"] == "64"
        assert f["--chunked-prefill-size"] == "2048" and f["--page-size"] == "16"
        assert f["--speculative-algorithm"] in names["choices"]["--speculative-algorithm"]
        assert f["--speculative-num-steps"] == "3" and f["--speculative-num-draft-tokens"] == "4"
        assert f["--kv-cache-dtype"] in names["choices"]["--kv-cache-dtype"]
    else:
        assert f["--tp_size"] == "1" and f["--max_batch_size"] == "64"
        assert f["--max_num_tokens"] == "2048"
        assert 0 < float(f["--kv_cache_free_gpu_memory_fraction"] or "") < 1
        keys = _yaml_keys(r.out)
        assert keys <= set(names["yaml_keys"]), keys - set(names["yaml_keys"])
        assert "decoding_type: Eagle3" in r.out and "max_draft_len: 3" in r.out


def test_data_parallel_attention_with_experts(cli):
    """ep over tp's replicas: vLLM's DP × TP with EP, SGLang's tp-size every GPU."""
    r = cli("serve", "--preset", "mixtral-8x7b", "--gpu", "h100-sxm", "--requests", "2",
            "--prompt-tokens", "64", "--output-tokens", "4", "--tp", "2", "--ep", "8",
            "--emit", "vllm")
    f = _flags(_commands(r.out)[0])
    assert (f["--tensor-parallel-size"], f["--data-parallel-size"]) == ("2", "4")
    assert "--enable-expert-parallel" in f
    r = cli("serve", "--preset", "mixtral-8x7b", "--gpu", "h100-sxm", "--requests", "2",
            "--prompt-tokens", "64", "--output-tokens", "4", "--tp", "2", "--ep", "8",
            "--emit", "sglang")
    f = _flags(_commands(r.out)[0])
    assert (f["--tp-size"], f["--dp-size"], f["--ep-size"]) == ("8", "4", "8")
    assert set(f) <= set(FLAGS["sglang"]["flags"])


@pytest.mark.parametrize("args, flag", [
    (["--dtype", "int4", "--emit", "vllm"], "dtype"),
    (["--kv-dtype", "int8", "--emit", "sglang"], "kv-dtype"),
    (["--emit", "tgi"], "emit"),
    (["--emit", "vllm", "--json"], "emit"),
])
def test_what_an_engine_cannot_take_is_refused(cli, args, flag):
    r = cli("serve", "--preset", "seed-tiny", "--gpu", "h100-sxm", "--requests", "2", *args)
    assert r.code == 2 and r.out == ""
    assert r.err.startswith(f"error: {flag}:") and len(r.err.strip().splitlines()) == 1


def test_ep_not_a_multiple_of_tp_is_refused():
    from shapecalc.model.config import ShapecalcError

    with pytest.raises(ShapecalcError) as e:
        _check("vllm", {"tp": 4, "ep": 6})
    assert e.value.field == "ep"


PD = ("serve", "--preset", "llama3.1-8b", "--gpu", "h100-sxm", "--requests", "2",
      "--prompt-tokens", "64", "--output-tokens", "8", "--tp", "2", "--pd", "2:1",
      "--max-batched-tokens", "2048")


@pytest.mark.parametrize("engine", ["vllm", "sglang", "dynamo"])
def test_a_disaggregated_plan_emits_each_pools_instances(cli, engine):
    """--pd 2:1 of tp=2: two prefill instances and one decode instance, each on its own 2 GPUs,
    every flag the engine's own (tests/data/engine_flags.json) and every value one it takes."""
    r = cli(*PD, "--emit", engine)
    assert r.code == 0, r.err
    vllm = FLAGS["vllm"]
    cmds = [c for c in _commands(r.out) if "dynamo.frontend" not in c]
    if engine == "sglang":
        *servers, router = cmds
        assert router[:3] == ["python", "-m", FLAGS["sglang"]["disaggregation"]["router_module"]]
        rf = _flags(router)
        assert set(rf) <= set(FLAGS["sglang"]["disaggregation"]["router_flags"])
        # one --prefill a prefill server, one --decode a decode server, by their ports
        assert router.count("--prefill") == 2 and router.count("--decode") == 1
    else:
        servers = cmds
    assert len(servers) == 3
    known = set((vllm if engine != "sglang" else FLAGS["sglang"])["flags"])
    if engine == "dynamo":
        known |= set(FLAGS["dynamo"]["worker_flags"]["flags"])
    sides = []
    for cmd in servers:
        f = _flags(cmd)
        assert set(f) <= known, set(f) - known
        assert f.get("--tensor-parallel-size", f.get("--tp-size")) == "2"
        if engine == "sglang":
            side = f["--disaggregation-mode"]
            assert side in FLAGS["sglang"]["choices"]["--disaggregation-mode"]
            assert f["--disaggregation-transfer-backend"] in \
                FLAGS["sglang"]["choices"]["--disaggregation-transfer-backend"]
        else:
            kv = json.loads(f["--kv-transfer-config"] or "")
            tv = vllm["kv_transfer_config"]
            assert set(kv) <= set(tv["keys"]) and kv["kv_role"] in tv["kv_roles"]
            assert kv["kv_connector"] in tv["connectors"]
            if engine == "vllm":
                side = {"kv_producer": "prefill", "kv_consumer": "decode"}[kv["kv_role"]]
            else:
                side = "prefill" if "--is-prefill-worker" in f else "decode"
                assert (f"--is-{side}-worker" in f) and kv["kv_role"] == "kv_both"
        sides.append(side)
    assert sides == ["prefill", "prefill", "decode"]
    # 6 GPUs of one 8-GPU node: 0,1 and 2,3 prefill, 4,5 decode
    assert [c[0] for c in servers] == ["CUDA_VISIBLE_DEVICES=0,1", "CUDA_VISIBLE_DEVICES=2,3",
                                       "CUDA_VISIBLE_DEVICES=4,5"]
    assert r.out.splitlines()[0].startswith("# llama3.1-8b on H100-SXM: prefill 2 × 2 GPUs + "
                                            "decode 1 × 2 GPUs = 6 GPUs")


def test_a_disaggregated_plan_for_trtllm_is_context_and_generation_servers(cli):
    """Two context servers and a generation server, each with its own --extra_llm_api_options
    file, and `trtllm-serve disaggregated` over their URLs: every flag and key TensorRT-LLM's."""
    r = cli(*PD, "--emit", "trtllm")
    assert r.code == 0, r.err
    trt = FLAGS["trtllm"]
    dis = trt["disaggregated"]
    *servers, router = _commands(r.out)
    assert router == ["trtllm-serve", *dis["subcommand"], "disagg_config.yaml"]
    files = {}
    for block in r.out.split("cat > ")[1:]:
        name, _, body = block.partition(" <<'EOF'\n")
        files[name] = body.split("\nEOF", 1)[0]
    assert set(files) == {"context-extra-llm-api-config.yml",
                          "generation-extra-llm-api-config.yml", "disagg_config.yaml"}
    for name in ("context-extra-llm-api-config.yml", "generation-extra-llm-api-config.yml"):
        keys = _yaml_keys(f"cat > {name}\n{files[name]}\nEOF")
        assert keys <= set(trt["yaml_keys"]) | set(dis["yaml_keys"]), keys
    assert "disable_overlap_scheduler: true" in files["context-extra-llm-api-config.yml"]
    cfg = [x for x in files["disagg_config.yaml"].splitlines() if not x.strip().startswith("-")]
    assert _yaml_keys("cat > c\n" + "\n".join(cfg) + "\nEOF") <= set(dis["config_keys"])
    assert files["disagg_config.yaml"].count('- "localhost:') == 3
    ports = []
    for cmd in servers:
        f = _flags(cmd)
        assert set(f) <= set(trt["flags"]) | set(dis["server_flags"]), f
        assert f["--tp_size"] == "2" and 0 < float(f["--kv_cache_free_gpu_memory_fraction"] or "")
        ports.append((f["--port"], f["--extra_llm_api_options"]))
    assert ports == [("8001", "context-extra-llm-api-config.yml"),
                     ("8002", "context-extra-llm-api-config.yml"),
                     ("8003", "generation-extra-llm-api-config.yml")]


def test_find_gpus_plan_of_a_searched_spec_k_is_emitted_at_that_k(cli):
    """--find-gpus with --draft and no --spec-k emits the k the plan found."""
    r = cli("serve", "--preset", "llama3.1-8b", "--gpu", "h100-sxm", "--rate", "1",
            "--prompt-tokens", "512", "--output-tokens", "64", "--requests", "16",
            "--find-gpus", "--slo", "ttft=1s,tpot=3.6ms", "--tp", "1", "--pp", "1",
            "--max-batched-tokens", "4096", "--draft", "eagle3", "--draft-config", EAGLE3,
            "--acceptance", "0.8", "--emit", "vllm")
    assert r.code == 0, r.err
    cfg = json.loads(_flags(_commands(r.out)[0])["--speculative-config"] or "")
    assert cfg["num_speculative_tokens"] == 3  # tests/test_serve_search_dims.py: k = 3 meets


def test_a_disaggregated_plan_keeps_each_pools_data_parallel_attention(cli):
    """--tp 2 --ep 8 --pd 1:1: each pool's server is SGLang's 8 GPUs of 4 attention replicas."""
    r = cli("serve", "--preset", "mixtral-8x7b", "--gpu", "h100-sxm", "--requests", "2",
            "--prompt-tokens", "64", "--output-tokens", "4", "--tp", "2", "--ep", "8",
            "--pd", "1:1", "--emit", "sglang")
    assert r.code == 0, r.err
    *servers, _ = _commands(r.out)
    for cmd, side in zip(servers, ("prefill", "decode"), strict=True):
        f = _flags(cmd)
        assert (f["--tp-size"], f["--dp-size"], f["--ep-size"]) == ("8", "4", "8")
        assert "--enable-dp-attention" in f and f["--disaggregation-mode"] == side


def test_find_gpus_refuses_a_prefill_layout(cli):
    r = cli("serve", "--preset", "llama3-8b", "--gpu", "h100-sxm", "--rate", "2", "--find-gpus",
            "--slo", "ttft=1s", "--pd", "1:1", "--prefill-tp", "2")
    assert r.code == 2 and r.out == "" and r.err.startswith("error: prefill-tp: --find-gpus")
