"""Hardware profiles: the nine datasheet files, user folders, overrides, and bad input."""

from __future__ import annotations

import pytest

from shapecalc.inputs.hardware import PEAK_DTYPES, list_gpus, load_gpu, parse_quantity
from shapecalc.model.config import ShapecalcError

MiB = 2**20
# what the driver reports as total memory (nvidia-smi MiB, rocm-smi bytes); see each file
MEMORY = {
    "A100-40GB": 40960 * MiB,
    "A100-80GB": 81920 * MiB,
    "H100-SXM": 81559 * MiB,
    "H100-PCIe": 81559 * MiB,
    "H200": 143771 * MiB,
    "B200": 183359 * MiB,
    "MI300X": 205_822_885_888,
    "L40S": 46068 * MiB,
    "RTX-4090": 24564 * MiB,
}


def test_the_nine_profiles_load_with_their_sources():
    assert set(MEMORY) <= set(list_gpus())
    for name, mem in MEMORY.items():
        g = load_gpu(name)
        assert g.name == name and g.memory_bytes == mem
        assert "datasheet" in g.source.lower() or "whitepaper" in g.source.lower() or (
            "data sheet" in g.source.lower()
        )
        assert g.hbm_bandwidth > 5e11 and g.link_bandwidth >= 3.2e10
        assert g.peak("bf16") and g.peak("fp16") and g.peak("fp32") and g.peak("int8")
        # dense peaks only: a tensor dtype is faster than fp32, and fp8 (where there) ≥ bf16
        assert g.peak("bf16") > g.peak("fp32")
        if g.peak("fp8"):
            assert g.peak("fp8") >= g.peak("bf16")


def test_datasheet_values():
    h100 = load_gpu("H100-SXM")
    assert h100.hbm_bandwidth == 3.35e12
    assert h100.link_bandwidth == 450e9  # NVLink 4: 900 GB/s both directions
    assert h100.peak("bf16") == 989.5e12  # 1,979 with sparsity, halved
    assert h100.peak("fp8") == 1979e12
    a100 = load_gpu("A100-80GB")
    assert a100.peak("fp8") is None  # no fp8 on Ampere
    assert a100.peak("bf16") == 312e12 and a100.hbm_bandwidth == 2.039e12
    assert load_gpu("MI300X").peak("fp16") == 1307.4e12
    assert load_gpu("B200").peak("fp8") == 4.5e15


def test_names_are_case_insensitive_and_files_work(tmp_path):
    assert load_gpu("h100-sxm").name == "H100-SXM"
    f = tmp_path / "mine.toml"
    f.write_text(
        'name = "mine"\nsource = "my bench"\nmemory_bytes = 1000\nhbm_bandwidth = 1e9\n'
        "link_bandwidth = 1e9\n[peak_flops]\nbf16 = 1e12\n"
    )
    assert load_gpu(str(f)).memory_bytes == 1000


def test_user_folder_by_option_and_environment(tmp_path, monkeypatch, cli):
    (tmp_path / "H100-SXM.toml").write_text(
        'name = "H100-SXM"\nsource = "overclocked"\nmemory_bytes = 96000000000\n'
        "hbm_bandwidth = 4e12\nlink_bandwidth = 4.5e11\n[peak_flops]\nbf16 = 1e15\n"
    )
    assert load_gpu("H100-SXM", [tmp_path]).memory_bytes == 96_000_000_000  # shadows the built-in
    monkeypatch.setenv("SHAPECALC_HARDWARE", str(tmp_path))
    assert load_gpu("H100-SXM").source == "overclocked"
    r = cli("hardware", "H100-SXM", "--json")
    assert r.code == 0 and r.json()["memory_bytes"] == 96_000_000_000


def test_overrides():
    g = load_gpu("H100-SXM", sets=["hbm_bandwidth=3.0e12", "peak_flops.fp8=1.5PFLOP/s",
                                   "memory_bytes=96GiB", "link_bandwidth=400GB/s"])
    assert g.hbm_bandwidth == 3.0e12
    assert g.peak("fp8") == 1.5e15
    assert g.memory_bytes == 96 * 2**30
    assert g.link_bandwidth == 400e9
    assert load_gpu("A100-80GB", sets=["peak_flops.fp8=624e12"]).peak("fp8") == 624e12


def test_quantities():
    assert parse_quantity("3.35TB/s", "x") == 3.35e12
    assert parse_quantity("80GiB", "x") == 80 * 2**30
    assert parse_quantity("989.5 TFLOP/s", "x") == 989.5e12
    assert parse_quantity("1.5TOPS", "x") == 1.5e12
    assert parse_quantity("42", "x") == 42


@pytest.mark.parametrize(
    "sets, field",
    [
        (["nope=1"], "set-gpu"),
        (["peak_flops.fp4=1"], "set-gpu"),
        (["peak_flops=1"], "set-gpu"),
        (["hbm_bandwidth=fast"], "set-gpu"),
        (["hbm_bandwidth=0"], "set-gpu"),
        (["memory_bytes=1.5"], "set-gpu"),
        (["noequals"], "set-gpu"),
    ],
)
def test_bad_overrides(sets, field):
    with pytest.raises(ShapecalcError) as e:
        load_gpu("H200", sets=sets)
    assert e.value.field == field


def test_bad_profiles(tmp_path):
    (tmp_path / "broken.toml").write_text("memory_bytes = [\n")
    (tmp_path / "partial.toml").write_text('name = "partial"\nsource = "x"\n')
    with pytest.raises(ShapecalcError, match="not valid TOML"):
        load_gpu("broken", [tmp_path])
    with pytest.raises(ShapecalcError) as e:
        load_gpu("partial", [tmp_path])
    assert e.value.field.startswith("gpu.")
    with pytest.raises(ShapecalcError, match="unknown GPU"):
        load_gpu("X100")


def test_hardware_command(cli):
    r = cli("hardware")
    assert r.code == 0 and "MI300X" in r.out and "85,520,809,984" in r.out
    r = cli("hardware", "--json")
    assert r.code == 0 and len(r.json()) >= 9
    for doc in r.json():
        assert set(doc["peak_flops"]) == set(PEAK_DTYPES)
    r = cli("hardware", "X100")
    assert r.code == 2 and r.err.count("\n") == 1 and r.err.startswith("error: gpu: unknown GPU")
