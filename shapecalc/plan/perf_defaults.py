"""Written by `shapecalc calibrate --write-defaults` (plan/calibrate.py): do not edit by hand
(tests/test_perf.py re-runs the fit and asserts these values)."""

DATE = "2026-11-30"
DATA = "tests/data/serving-measurements.json (15 records)"
PARAMS = {
    "gemm_efficiency": 0.5599,
    "gemm_half_tokens": 20.25,
    "memory_efficiency": 0.8606,
    "attention_efficiency": 0.4998,
    "layer_overhead_s": 6.799e-05,
    "prefill_layer_overhead_s": 0.0001293,
    "allreduce_latency_s": 1.753e-06,
    "link_efficiency": 0.6309,
}
