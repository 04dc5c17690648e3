"""Measuring transformers' own model of a config.json: the optional extra `shapecalc[reference]`
(torch and transformers, pinned in pyproject.toml).

`measure` holds the counting code (parameters per module on the meta device, FLOPs per module
with FlopCounterMode over a prefill and one decode step, the bytes of transformers' cache) of
tests/torch_reference's harness. It imports torch, so nothing on shapecalc's start-up path
imports it.
"""
