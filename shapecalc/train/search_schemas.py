"""The JSON Schema of `train --search --json` (`shapecalc schema train_search`), each key
described; the rows mirror train/search.py's search_doc."""

from __future__ import annotations

from pydantic import StrictInt

from ..costs.described import described, many
from .schemas import TrainCost

I, IN, F, FN = StrictInt, StrictInt | None, float, float | None

_LAYOUT = (
    ("tp", I, "tensor-parallel degree"), ("cp", I, "context-parallel degree"),
    ("pp", I, "pipeline stages"), ("ep", I, "expert-parallel degree (inside dp)"),
    ("dp", I, "data-parallel degree: GPUs / (tp·cp·pp)"),
    ("micro_batch", I, "b: sequences a micro-batch"),
    ("recompute", str, "none | selective | full | torch"),
    ("framework", str, "whose memory rules, step-time terms and DP overlap the layout is "
     "planned under (train --framework)"))
_GRID = (
    ("virtual_stages", I, "v: interleaved model chunks per pipeline rank", None),
    ("grad_accum", I, "m: micro-batches a step", None),
    ("zero", I, "ZeRO stage 0..3", None))

Candidate = described(
    "TrainSearchCandidate", "One layout the search tried; `fails` absent where it runs and fits",
    *_LAYOUT, *[(k, IN, w, d) for k, _, w, d in _GRID],
    ("step_s", FN, "the predicted step (train/time.py), where it was timed", None),
    ("peak_bytes", IN, "the peak rank's bytes (train's exact count), where counted", None),
    ("fails", str | None, "divisibility | topology | framework | bubble | memory", None),
    ("why", str | None, "the reason, one line", None))

Best = described(
    "TrainSearchBest", "One of the fastest layouts that fit",
    *_LAYOUT, *[(k, I, w) for k, _, w, _ in _GRID],
    ("step_s", F, "the predicted step, seconds (train/time.py)"),
    ("peak_bytes", I, "the peak rank's bytes"),
    ("free_bytes", I, "the GPU's memory left on the peak rank"),
    ("mfu", FN, "model FLOPs utilization"), ("hfu", FN, "with the recompute"),
    ("tokens_per_s_per_gpu", FN, "tokens trained per second per GPU"),
    ("train_args", str, "the train flags that plan this layout alone (with --global-batch): "
     "--framework (and --fp8) where not hf"),
    ("cost", TrainCost | None, "what it costs (with a price: --price or the profile's)", None))

Why = described(
    "TrainSearchFrameworkWhy", "One framework refusal and how many candidates it refused",
    ("why", str, "the framework's reason, naming it (frameworks.framework's check)"),
    ("count", I, "how many candidates"))

ByFramework = described(
    "TrainSearchByFramework", "One framework's fastest layout that fits",
    *_LAYOUT, *[(k, I, w) for k, _, w, _ in _GRID],
    ("step_s", F, "the predicted step, seconds (train/time.py)"),
    ("peak_bytes", I, "the peak rank's bytes"),
    ("train_args", str, "the train flags that plan this layout alone (with --global-batch)"))

Failed = described(
    "TrainSearchFailed", "The layouts that fail for one reason",
    ("reason", str, "divisibility | topology | framework | bubble | memory"),
    ("count", I, "how many candidates"), ("example", Candidate, "the first of them"),
    ("whys", many(Why) | None, "reason framework: each distinct refusal, most common first",
     None))

Space = described(
    "TrainSearchSpace", "The dimensions searched beyond tp, cp, pp, ep and dp",
    ("frameworks", list[str], "the frameworks tried (every one the flags apply to, or "
     "--framework's)"),
    ("recompute", list[str], "the recompute options"), ("zero", list[int], "the ZeRO stages"),
    ("max_micro_batch", I, "micro-batches are divisors of global batch / dp up to this"),
    ("max_virtual_stages", I, "v runs 1..this (at least v layers a stage)"),
    ("max_cp", I, "cp is a power of two up to this"))

TrainSearchOut = described(
    "TrainSearchOut", "`train --search --json`: the fastest layouts of N GPUs that fit, and why "
    "the others do not",
    ("gpus", I, "--gpus"), ("gpu", str, "the GPU profile"),
    ("gpu_memory_bytes", I, "the GPU's memory"),
    ("global_batch", I, "--global-batch: sequences a step"), ("seq", I, "T"),
    ("tokens_per_step", I, "global_batch × T"), ("precision", str, "--precision"),
    ("attention", str, "--attention"),
    ("fp8", str | None, "--fp8: the fp8 recipe every layout is planned with, else null"),
    ("space", Space, "what was searched"),
    ("candidates", I, "layouts tried"), ("fitting", I, "of which run and fit"),
    ("best", many(Best), "the fastest few, fastest first"),
    ("best_by_framework", many(ByFramework), "each searched framework's fastest layout that "
     "fits, in the order searched (none for a framework where none fits)"),
    ("failed", many(Failed), "the others, grouped by reason"),
    ("closest_miss", Candidate | None, "where nothing fits: the smallest peak over the GPU"))
