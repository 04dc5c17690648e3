"""`shapecalc verify` and `shapecalc explain` (loaded when invoked: lazy.py).

numpy and rich are imported inside the commands, so each loads only what it needs.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from ..model.config import ShapecalcError
from .options import (
    EP,
    PP,
    TP,
    ActDtype,
    AttnFlops,
    Batch,
    BlockSize,
    ConfigFile,
    DtypeOpt,
    HFConfig,
    JsonOut,
    KvDtype,
    Logits,
    MixerFlops,
    MlaForm,
    Mtp,
    PaddingMask,
    Phase,
    Preset,
    PresetsDir,
    Selection,
    Seq,
    Sets,
    StateCache,
    StateDtype,
    emit_json,
    fail,
    resolve_model,
    resolve_workload,
    seq_note,
)

Layers = Annotated[
    int | None,
    typer.Option("--layers", "-k", help="K: layers to run (default: as many as fit the memory "
                 "budget and about 2 minutes, estimated from the counts, at least one of each "
                 "kind of layer; more is refused); each kind's totals are extrapolated "
                 "×count/run"),
]
Precision = Annotated[
    str | None, typer.Option("--precision", show_default="float32", help="NumPy dtype the "
                             "executor computes in: float32 | float64 | float16 (--train: "
                             "float64, always)")
]
Seed = Annotated[int, typer.Option("--seed", min=0, help="seed of the random weights and tokens")]
Budget = Annotated[
    float | None,
    typer.Option("--memory-budget", help="GiB verify may allocate (default 4: fixed, not the free "
                 "memory, so every machine runs the same plan); K layers and resident or streamed "
                 "weights are chosen to fit it"),
]
Train = Annotated[
    bool, typer.Option("--train", help="run a training step's backward too (hand-written "
                       "vector-Jacobian rules, narrowed model, float64): gradient shapes, "
                       "backward FLOPs against the symbolic count, finite differences")]
Recompute = Annotated[
    str | None, typer.Option("--recompute", show_default="none", help="with --train: none | "
                             "selective | full | torch — re-run those forward stages in each "
                             "layer's backward, count their FLOPs, compare the gradients")]
Against = Annotated[
    str | None, typer.Option("--against", show_default="none: shapecalc's own NumPy executor",
                             help="transformers: build the config.json (--hf-config, "
                             "or a preset's stored one) with transformers on the meta device and "
                             "check params, prefill and decode FLOPs and KV bytes against its "
                             "own counts, naming the module where one first differs (B=1, T=16 "
                             "unless given; needs pip install 'shapecalc[reference]')")]
VERIFY_DEFAULTS = {"batch": 2}  # small B and T (VERIFY_SEQ): verify runs real widths
VERIFY_SEQ = 16


def _fmt(x: Any) -> str:
    if x is None:
        return "—"
    if isinstance(x, bool):
        return str(x)
    if isinstance(x, int):
        return f"{x:,}"
    if isinstance(x, float):
        return f"{x:.3g}" if x else "0"
    if isinstance(x, list):
        return ", ".join(_fmt(v) for v in x)
    return str(x)


def print_verify(doc: dict[str, Any], seq_note: str | None = None) -> None:
    wl = doc["workload"]
    title = (f"verify {doc['model']}: B={wl['batch']} {seq_note or 'T=' + str(wl['seq'])} "
             f"{wl['phase']}, "
             f"p={wl['tp']} s={wl['pp']}, {doc['precision']}")
    if wl.get("mixer_flops") or wl.get("state_cache"):  # a convention asked for: named
        title += f" · mixers: {wl['mixer_flops'] or 'transformers-torch'} FLOPs, " \
            f"{wl['state_cache'] or 'transformers'} states"

    def cells(c: dict[str, Any]) -> tuple[str, str]:
        sym = f"0 (± {c['tolerance']:.1e})" if "tolerance" in c else _fmt(c["symbolic"])
        return sym, _fmt(c["measured"])

    from ..render.checks import print_checks

    print_checks(title, doc["checks"], cells,
                 f"{doc['note']}. Memory estimate {doc['memory_estimate_bytes'] / 2**30:.2f} GiB "
                 f"of a {doc['memory_budget_bytes'] / 2**30:.2f} GiB budget.")


def _progress(enabled: bool, console: Any = None) -> Any:
    """One rich progress bar on stderr when it is a terminal: step k of n of the whole run (each
    forward run's layers and head: check.verify.Steps), what runs now and the time elapsed."""
    if not enabled:
        return None, None
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    console = console or Console(stderr=True)
    if not console.is_terminal:
        return None, None
    bar = Progress(TextColumn("verify: {task.description}"), BarColumn(),
                   TextColumn("step"), MofNCompleteColumn(), TimeElapsedColumn(),
                   console=console, transient=True)  # a long step still shows time passing
    task = bar.add_task("starting", total=None)

    def report(label: str, done: int, total: int) -> None:
        bar.update(task, completed=done, total=total, description=label)

    return bar, report


def verify(
    preset: Preset = None,
    config: ConfigFile = None,
    hf_config: HFConfig = None,
    set_: Sets = None,
    presets_dir: PresetsDir = None,
    batch: Batch = None,
    seq: Seq = None,
    phase: Phase = None,
    dtype: DtypeOpt = None,
    kv_dtype: KvDtype = None,
    act_dtype: ActDtype = None,
    logits: Logits = None,
    tp: TP = None,
    pp: PP = None,
    ep: EP = None,
    mla_form: MlaForm = None,
    selection: Selection = None,
    mtp: Mtp = None,
    block_size: BlockSize = None,
    attention_flops: AttnFlops = None,
    padding_mask: PaddingMask = None,
    mixer_flops: MixerFlops = None,
    state_cache: StateCache = None,
    state_dtype: StateDtype = None,
    layers: Layers = None,
    precision: Precision = None,
    seed: Seed = 0,
    memory_budget: Budget = None,
    as_json: JsonOut = False,
    train: Train = False,
    recompute: Recompute = None,
    against: Against = None,
) -> None:
    from ..check.budget import budget_bytes, estimate
    from ..check.verify import verify as run_verify

    try:
        if against is not None:  # transformers' own counts: check/against.py
            from ..check.against import run as run_against

            given = {"set": set_, "phase": phase, "kv_dtype": kv_dtype, "act_dtype": act_dtype,
                     "logits": logits, "tp": tp, "pp": pp, "ep": ep, "mla_form": mla_form,
                     "block_size": block_size, "attention_flops": attention_flops,
                     "padding_mask": padding_mask, "mixer_flops": mixer_flops,
                     "state_cache": state_cache, "state_dtype": state_dtype,
                     "layers": layers, "precision": precision,
                     "seed": seed, "memory_budget": memory_budget, "train": train,
                     "recompute": recompute}
            doc = run_against(against, preset, config, hf_config, presets_dir, batch=batch,
                              seq=seq, dtype=dtype, given=given)
            if as_json:
                emit_json(doc)
            else:
                from ..render.checks import print_against

                print_against(doc)
            raise typer.Exit(0 if doc["ok"] else 1)
        if precision not in (None, "float32", "float64", "float16"):
            raise ShapecalcError("precision", f"{precision!r} is not one of float32, "
                                 "float64, float16")
        model, wbase = resolve_model(preset, config, hf_config, set_, presets_dir)
        wl = resolve_workload(
            {**VERIFY_DEFAULTS, **wbase}, None, model, preferred_seq=VERIFY_SEQ, batch=batch,
            seq=seq, phase=phase, dtype=dtype,
            kv_dtype=kv_dtype, act_dtype=act_dtype, logits=logits, tp=tp, pp=pp, ep=ep,
            mla_form=mla_form, mtp=mtp, block_size=block_size, attention_flops=attention_flops,
            padding_mask=padding_mask, mixer_flops=mixer_flops, state_cache=state_cache,
            state_dtype=state_dtype, selection=selection,
        )
        budget = None if memory_budget is None else budget_bytes(memory_budget)
        if train:  # the backward: cli/verify_train.py
            from .verify_train import print_train, run_train

            given = {"phase": phase, "logits": logits, "precision": precision,
                     "memory_budget": memory_budget}
            doc = run_train(model, wl, layers=layers, seed=seed, recompute=recompute or "none",
                            given=given)
            if as_json:
                emit_json(doc)
            else:
                print_train(doc)
            raise typer.Exit(0 if doc["ok"] else 1)
        if recompute is not None:
            raise ShapecalcError("recompute", "re-runs stages in a backward: give --train")
        precision = precision or "float32"

        # a bar only where a run takes more than a moment: real widths
        bar, report = _progress(estimate(model, wl, 1) > 256 << 20)
        if bar is not None:
            with bar:
                doc = run_verify(model, wl, layers=layers, precision=precision, seed=seed,
                                 budget=budget, progress=report)
        else:
            doc = run_verify(model, wl, layers=layers, precision=precision, seed=seed,
                             budget=budget)
    except ShapecalcError as e:
        fail(e)
    if as_json:
        emit_json(doc)
    else:
        print_verify(doc, seq_note(model, wl, seq, wbase, VERIFY_SEQ))
    if not doc["ok"]:
        raise typer.Exit(1)


def explain(
    preset: Preset = None,
    config: ConfigFile = None,
    hf_config: HFConfig = None,
    set_: Sets = None,
    presets_dir: PresetsDir = None,
    seq: Annotated[int | None, typer.Option("--seq", "-t", help="T: tokens (own model; "
                                               "default 4)")] = None,
    seed: Seed = 0,
    scan: Annotated[bool, typer.Option(
        "--scan", help="walk one Mamba-2 scan by hand instead: 3 tokens, a state of 2, its "
        "recurrence and its chunked form")] = False,
    as_json: JsonOut = False,
    example: Annotated[str | None, typer.Option(
        "--example", show_default="none: the worked example or --preset's",
        help="topk: DeepSeek Sparse Attention's top-k selection by hand (6 keys, "
        "K_sel = 2)")] = None,
) -> None:
    from ..check import explain as ex
    from ..model.defaults import default_seq

    try:
        from .once import given

        if scan and example is not None:
            raise ShapecalcError("scan", "give --scan or --example, not both")
        worked = example is not None or scan or (preset is None and config is None
                                                 and hf_config is None and not set_)
        if worked and given("seed"):  # the worked examples' numbers are written out, not drawn
            raise ShapecalcError("seed", "draws a model's weights; the worked examples have "
                                 "their own numbers: give --preset or --config, or leave out "
                                 "--seed")
        example = "scan" if scan else example
        if example is not None:  # a worked example of its own: no model, no --seq
            if example not in ("scan", "topk"):
                raise ShapecalcError("example", f"{example!r}: one of scan, topk")
            if preset or config or hf_config or set_ or seq is not None:
                raise ShapecalcError("scan" if scan else "example", f"the {example} example is "
                                     "its own; give no model and no --seq with it")
            from ..check.explain_scan import scan_example

            doc = scan_example() if example == "scan" else ex.topk_example()
        elif preset is None and config is None and hf_config is None and not set_:
            if seq is not None:
                raise ShapecalcError("seq", "the worked example has T=3; --seq needs a "
                                     "--preset or --config")
            doc = ex.seed_example()
        else:
            model, _ = resolve_model(preset, config, hf_config, set_, presets_dir)
            T = default_seq(model, preferred=4) if seq is None else seq  # --seq 0 is refused
            doc = ex.own_model(model, T, seed, presets_dir)
    except ShapecalcError as e:
        fail(e)
    if as_json:
        emit_json(ex.to_json(doc))
    else:
        from ..render.explain import print_explain

        print_explain(doc)


HELP = {
    "verify": "Run the model in NumPy (seeded random weights, real widths, K layers) and "
    "check every symbolic number against the measured one: stage shapes, FLOPs, "
    "params, bytes, KV cache (contiguous and paged), decode vs full forward, TP "
    "all-reduce, PP boundary, causal and padding masks. Exit 1 on a mismatch.",
    "explain": "Walk the worked attention example (single-head attention by hand, and the "
    "causal mask) (X, WQ, WK, WV) through the executor: Q, K, V, QKᵀ, scaled "
    "scores, softmax weights, output, and the causal "
    "variant, each with its shape and the [m,n]×[n,p] rule. With --preset/--config: "
    "head 0 of layer 0 of your own (toy) model on a seeded input. With --scan: one Mamba-2 "
    "scan by hand (3 tokens, a state of 2), step by step and in chunks.",
}
COMMANDS = {"verify": verify, "explain": explain}
