"""The columns a sweep row adds with --gpu (fit and times) and --price, declared once: the sweep
writes them in this order and the SweepRow schema is made from them."""

from __future__ import annotations

# name → JSON type: int, bool, float, or bound (compute | memory | communication)
FIT_COLUMNS: tuple[tuple[str, str], ...] = (
    ("fits", "bool"), ("mem_weights", "int"), ("mem_kv_cache", "int"), ("mem_state_cache", "int"),
    ("mem_activations", "int"), ("mem_reserve", "int"), ("mem_total", "int"),
    ("mem_capacity", "int"), ("kv_tokens_fit", "int"), ("prefill_s", "float"),
    ("decode_s_per_token", "float"), ("ttft_s", "float"), ("tokens_per_s", "float"),
    ("prefill_bound", "bound"), ("decode_bound", "bound"),
    # the calibrated expectation (plan/perf.py); term: compute | memory | communication | overhead
    ("expected_ttft_s", "float"), ("expected_decode_s_per_token", "float"),
    ("expected_tokens_per_s", "float"), ("expected_tokens_per_s_per_gpu", "float"),
    ("expected_prefill_dominant", "term"), ("expected_decode_dominant", "term"),
)
PRICE_COLUMNS: tuple[tuple[str, str], ...] = (("cost_per_million_tokens", "float"),)
