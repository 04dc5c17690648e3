"""Answers a planner cannot misread (issue 25, items 1, 2, 5 and 6): a bare SLO number is
refused; --find-gpus reports the plan it found as the deployment; one exit-status rule (0
success, 1 a negative verdict, 2 bad input) for fit, train and serve; serve and train take the
report options every command takes, and serve's token counts are --prompt-tokens and
--output-tokens (a count given to --output is refused, naming --output-tokens)."""

from __future__ import annotations

import json

import pytest

SERVE = ("serve", "--preset", "llama3-8b", "--gpu", "h100-sxm", "--rate", "2",
         "--prompt-tokens", "256", "--output-tokens", "16", "--requests", "20")


def _one_line(r, field):
    assert r.code == 2, (r.code, r.err)
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {field}: "), r.err
    assert r.out == "" and "Traceback" not in r.err
    return lines[0]


@pytest.mark.parametrize("slo", ["ttft=1,itl=50", "itl=50", "ttft=0.5"])
def test_a_bare_slo_number_is_refused_naming_the_unit(cli, slo):
    line = _one_line(cli(*SERVE, "--slo", slo), "slo")
    assert "has no unit: add s, ms or us" in line


def test_a_repeated_slo_key_is_refused(cli):
    assert "given twice" in _one_line(cli(*SERVE, "--slo", "itl=50ms,itl=60ms"), "slo")


def test_find_gpus_reports_the_plan_it_found(cli):
    r = cli("serve", "--preset", "llama3-8b", "--gpu", "h100-sxm", "--rate", "40",
            "--prompt-tokens", "1024", "--output-tokens", "128", "--requests", "200",
            "--find-gpus", "--slo", "ttft=1s,itl=50ms", "--max-batched-tokens", "2048", "--json")
    doc = json.loads(r.out)
    plan, d = doc["find_gpus"]["plan"], doc["deployment"]
    assert plan is not None and r.code == 0
    assert (d["tp"], d["pp"], d["replicas"], d["gpus"]) == (
        plan["tp"], plan["pp"], plan["replicas"], plan["gpus"])
    assert doc["deployment_is"] == "the plan --find-gpus found"
    assert d["gpus"] == plan["replicas"] * plan["tp"] * plan["pp"] and d["gpus"] > 1
    table = cli("serve", "--preset", "llama3-8b", "--gpu", "h100-sxm", "--rate", "40",
                "--prompt-tokens", "1024", "--output-tokens", "128", "--requests", "200",
                "--find-gpus", "--slo", "ttft=1s,itl=50ms", "--max-batched-tokens", "2048")
    head = " ".join(table.out.splitlines()[:2])
    assert f"(tp={plan['tp']}, pp={plan['pp']}) = {plan['gpus']} GPUs" in head
    assert "1 replicas" not in table.out and "1 replica" in table.out  # its notes agree too


def test_one_gpu_and_one_replica_are_singular(cli):
    r = cli(*SERVE)
    assert "1 replica × (tp=1, pp=1) = 1 GPU," in r.out and "1 GPUs" not in r.out


def test_a_missed_slo_exits_1_and_a_met_one_0(cli):
    missed = cli(*SERVE, "--slo", "itl=1us", "--json")
    assert missed.code == 1 and json.loads(missed.out)["slo_met"] is False
    met = cli(*SERVE, "--slo", "ttft=100s,itl=10s", "--json")
    assert met.code == 0 and json.loads(met.out)["slo_met"] is True
    assert cli(*SERVE, "--json").code == 0  # no SLO: nothing to miss


def test_train_that_does_not_fit_exits_1(cli):
    r = cli("train", "--preset", "llama3-8b", "--seq", "64", "--gpu", "h100-sxm", "--json")
    assert json.loads(r.out)["memory"]["fits"] is False and r.code == 1
    ok = cli("train", "--preset", "llama3-8b", "--seq", "64", "--gpu", "h100-sxm", "--dp", "8",
             "--zero", "3", "--json")
    assert json.loads(ok.out)["memory"]["fits"] is True and ok.code == 0


@pytest.mark.parametrize("value", ["64", "uniform:10,20", "lognormal:200,0.7"])
def test_a_token_count_given_to_output_names_output_tokens(cli, value):
    assert "--output-tokens" in _one_line(cli(*SERVE, "--output", value), "output")


@pytest.mark.parametrize("cmd", [SERVE, ("train", "--preset", "llama3-8b", "--seq", "64")])
def test_serve_and_train_take_the_report_options(cli, tmp_path, cmd):
    out, page = tmp_path / "r.txt", tmp_path / "r.html"
    r = cli(*cmd, "--output", str(out), "--html", str(page))
    assert r.code == 0 and r.out == "", r.err
    assert out.read_text().strip() and "<!DOCTYPE html>" in page.read_text()
    assert 'id="shapecalc-data"' in page.read_text()  # the JSON rides along
    csv = cli(*cmd, "--format", "csv")
    assert csv.code == 0 and csv.out.startswith("key,value\n")
    assert "\nmodel.name,llama3-8b\n" in csv.out or "\nmodel,llama3-8b\n" in csv.out
    md = cli(*cmd, "--format", "markdown")
    assert md.code == 0 and md.out.startswith("| key | value |")


def test_trace_fixes_the_requests(cli, tmp_path):
    t = tmp_path / "t.jsonl"
    t.write_text('{"arrival_s": 0, "prompt_tokens": 16, "output_tokens": 4}\n')
    base = ("serve", "--preset", "llama3-8b", "--gpu", "h100-sxm", "--trace", str(t))
    for flag, v in (("--prompt-tokens", "32"), ("--output-tokens", "8"), ("--requests", "5")):
        assert flag in _one_line(cli(*base, flag, v), "trace")


def test_search_flags_that_would_be_ignored_are_refused(cli):
    base = ("serve", "--preset", "llama3-8b", "--gpu", "h100-sxm", "--slo", "ttft=1s")
    _one_line(cli(*base, "--find-rate", "--rate", "3"), "rate")
    _one_line(cli(*base, "--find-rate", "--concurrency", "3"), "concurrency")
    _one_line(cli(*base, "--find-gpus", "--rate", "3", "--replicas", "2"), "replicas")


def test_compare_and_sweep_exit_1_when_nothing_fits(cli):
    none = ("llama3-70b", "--gpu", "h100-sxm", "--seq", "8192")
    r = cli("compare", *none, "--json")
    assert r.code == 1 and not any(it["fit"]["fits"] for it in json.loads(r.out))
    assert cli("compare", *none, "llama3-8b", "--json").code == 0  # one fits
    assert cli("sweep", *none, "--format", "csv").code == 1
    assert cli("sweep", "llama3-8b", "--gpu", "h100-sxm", "--seq", "8192",
               "--format", "csv").code == 0
    assert cli("compare", "llama3-70b", "--seq", "8192", "--json").code == 0  # no GPU: no verdict


def test_fit_names_the_bound_and_the_expected_time(cli):
    doc = json.loads(cli("fit", "--preset", "llama3-8b", "--gpu", "h100-sxm", "--json").out)
    assert doc["roofline_times"] == doc["times"]  # one bound, two names (the first kept)
    # the bound is below the calibrated time the table leads with
    assert doc["roofline_times"]["ttft_s"] < doc["expected"]["ttft_s"]


def test_bare_shapecalc_lists_the_commands(cli):
    r = cli()
    assert r.code == 0 and "Missing command" not in r.err
    assert all(c in r.out for c in ("trace", "fit", "serve", "train", "verify"))


def test_presets_and_hardware_filter_by_substring_or_glob(cli):
    r = cli("presets", "llama3", "--json")
    names = [m["name"] for m in json.loads(r.out)]
    assert r.code == 0 and names and all("llama3" in n for n in names)
    r = cli("hardware", "H100*", "--json")
    assert sorted(g["name"] for g in json.loads(r.out)) == ["H100-NVL", "H100-PCIe", "H100-SXM"]
    assert json.loads(cli("presets", "llama3-8b", "--json").out)["name"] == "llama3-8b"  # one
    _one_line(cli("presets", "zzz"), "preset")  # nothing picked: the unknown name, as before
    # an override changes one named profile: listing them all with one is refused, not ignored
    _one_line(cli("hardware", "--set-gpu", "memory_bytes=1"), "set-gpu")


def test_shell_completion_script_and_answers(cli, monkeypatch):
    r = cli("completion", "bash")
    assert r.code == 0 and "_SHAPECALC_COMPLETE=complete_bash" in r.out
    assert "complete -o default -F" in r.out
    _one_line(cli("completion", "tcsh"), "shell")

    def complete(words: str) -> list[str]:
        monkeypatch.setenv("_SHAPECALC_COMPLETE", "complete_bash")
        monkeypatch.setenv("COMP_WORDS", words)
        cword = len(words.split()) - (0 if words.endswith(" ") else 1)
        monkeypatch.setenv("COMP_CWORD", str(cword))
        try:
            return cli().out.split()
        finally:
            monkeypatch.delenv("_SHAPECALC_COMPLETE")

    assert complete("shapecalc tr") == ["trace", "train"]
    # a lazy command's own options, and the names its values take
    assert complete("shapecalc fit --gp") == ["--gpu"]
    assert complete("shapecalc fit --gpu H1") == ["H100-NVL", "H100-PCIe", "H100-SXM"]
    assert complete("shapecalc trace --preset llama3.2") == ["llama3.2-1b", "llama3.2-3b"]


def test_help_says_what_each_flag_does(cli):
    """train's --seq is a training sequence; --dtype says which widths follow it (issue 25)."""
    train = " ".join(cli("train", "--help").out.split())
    assert "T: tokens in each training sequence" in train and "prompt tokens" not in train
    trace = " ".join(cli("trace", "--help").out.split())
    assert "8- and 4-bit ones keep them bf16" in trace


def test_ew_is_explained_under_the_stage_list(cli):
    out = cli("trace", "--preset", "gpt2", "--seq", "8").out
    assert " ew" in out and "ew: elementwise FLOPs" in out
