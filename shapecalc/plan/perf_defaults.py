"""Written by `shapecalc calibrate --write-defaults` (plan/calibrate.py): do not edit by hand
(tests/test_perf.py re-runs the fit and asserts these values)."""

DATE = "2026-11-30"
DATA = "tests/data/serving-measurements.json (15 records)"
PARAMS = {
    "gemm_efficiency": 0.5083,
    "gemm_half_tokens": 24.17,
    "memory_efficiency": 0.8424,
    "attention_efficiency": 0.506,
    "layer_overhead_s": 6.043e-05,
    "prefill_layer_overhead_s": 0.0001167,
    "allreduce_latency_s": 4.268e-06,
    "link_efficiency": 0.7209,
}
