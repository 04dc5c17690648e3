"""The command line: parse, call, render — nothing else.

Start-up matters (planners call `trace --json` in loops), so rich and numpy are imported only
inside the commands that print tables or run arrays.
"""

from __future__ import annotations

import atexit
import functools
import gc
import os
import sys
from typing import Annotated, Any

import typer

from ..model.config import ShapecalcError
from . import helptext, lazy
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
    Format,
    HFConfig,
    Html,
    JsonOut,
    KvDtype,
    Logits,
    MixerFlops,
    MlaForm,
    Mode,
    Mtp,
    Output,
    PaddingMask,
    Phase,
    Preset,
    PresetsDir,
    Selection,
    Seq,
    Sets,
    StateCache,
    StateDtype,
    Svg,
    emit_json,
    fail,
    resolve_model,
    resolve_workload,
    seq_note,
    show_target,
)

CONVENTIONS = (
    "Conventions: 1 multiply-add = 2 FLOPs; a matmul [m,k]×[k,n] costs 2·m·k·n. Attention "
    "matmuls count the full [T,T] (as eager attention does) unless --attention-flops causal. "
    "Elementwise work (norms, softmax, activations, RoPE, residuals, biases) is listed per stage "
    "and totalled apart. Bytes are exact integers; tables use binary units (KiB, MiB, GiB). "
    "Decode: T tokens are already cached and one new token reads T′ = T+1 keys."
)

app = typer.Typer(
    add_completion=False,
    no_args_is_help=False,
    pretty_exceptions_enable=False,
    context_settings=helptext.HELP_OPTIONS,
    help="Shapes, FLOPs, parameters, bytes, KV cache and TP/PP traffic of decoder-only "
    "Transformers, exactly. " + CONVENTIONS,
)


@app.callback()
def _root(
    version: Annotated[bool, typer.Option(
        "--version", help="print the version and exit", is_eager=True,
        callback=helptext.print_version)] = False,
) -> None:
    """Options before the command: --version, -h/--help."""


# -- commands -------------------------------------------------------------------------------------
@app.command(
    help="Every stage of one forward step: shapes, FLOPs, params, bytes; then totals "
    "and the TP/PP ledger. " + CONVENTIONS
)
def trace(
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
    mode: Mode = None,
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
    per_rank: Annotated[
        bool,
        typer.Option(
            "--per-rank", help="also list one tensor-parallel rank's stages (JSON: rank_stages)"
        ),
    ] = False,
    as_json: JsonOut = False,
    fmt: Format = "table",
    output: Output = None,
    svg: Svg = None,
    html: Html = None,
) -> None:
    from ..costs.trace import build_trace
    from ..inputs.unsupported import Unsupported
    from ..render.output import check_format, check_outputs

    try:
        try:
            model, wbase = resolve_model(preset, config, hf_config, set_, presets_dir)
        except Unsupported as e:  # day-0: measured by transformers, when it is installed
            from . import day0

            day0.trace(e, dict(batch=batch, seq=seq, phase=phase, dtype=dtype, logits=logits),
                       {"--set": set_, "--kv-dtype": kv_dtype, "--act-dtype": act_dtype,
                        "--mode": mode, "--tp": tp, "--pp": pp, "--ep": ep,
                        "--mla-form": mla_form, "--mtp": mtp, "--block-size": block_size,
                        "--attention-flops": attention_flops, "--padding-mask": padding_mask,
                        "--per-rank": per_rank, "--html": html, "--mixer-flops": mixer_flops,
                        "--state-cache": state_cache, "--state-dtype": state_dtype},
                       "json" if as_json else fmt, output, svg)
            return
        wl = resolve_workload(
            wbase,
            mode,
            model,
            batch=batch,
            seq=seq,
            phase=phase,
            dtype=dtype,
            kv_dtype=kv_dtype,
            act_dtype=act_dtype,
            logits=logits,
            tp=tp,
            pp=pp,
            ep=ep,
            mla_form=mla_form,
            selection=selection,
            mtp=mtp,
            block_size=block_size,
            attention_flops=attention_flops,
            padding_mask=padding_mask,
            mixer_flops=mixer_flops,
            state_cache=state_cache,
            state_dtype=state_dtype,
        )
        doc = build_trace(model, wl, per_rank=per_rank)
        if hf_config is not None:  # keys of its config.json that no reader reads
            from ..inputs.hf import notes

            doc.update({"notes": notes(model)} if notes(model) else {})
        note = seq_note(model, wl, seq, wbase)
        fmt = check_format("json" if as_json else fmt)
        check_outputs(output=output, svg=svg, html=html)
        if fmt == "json" and output is None and not (svg or html):
            emit_json(doc)  # the planners' hot path: no rich, no file
            return
        from ..render import output as out
        from ..render.console import render_table, write_with_exports
        from ..render.trace import print_trace, trace_csv, trace_markdown

        def draw(console: Any) -> None:
            print_trace(doc, per_rank=per_rank, console=console, seq_note=note)

        def page() -> str:
            from ..render.html import trace_html

            return trace_html(doc)

        if fmt == "table":
            render_table(draw, output, True, svg, html, page)
            return
        text = {
            "json": lambda: out.json_text(doc),
            "csv": lambda: trace_csv(doc),
            "markdown": lambda: trace_markdown(doc),
        }[fmt]()
        write_with_exports(text, output, draw, svg, html, page)
    except ShapecalcError as e:
        fail(e)


@app.command(help="List the model presets, or show one: `presets NAME` or `presets show NAME` "
             "(its fields, with the defaults it takes resolved: H_kv, Dh, …, and its parameters); "
             "`presets llama3` or `presets 'qwen3*'` lists those a substring or a glob picks.")
def presets(
    words: Annotated[list[str] | None, typer.Argument(
        help="NAME or show NAME (none: list every preset)", metavar="NAME",
        show_default=False)] = None,
    presets_dir: PresetsDir = None,
    as_json: JsonOut = False,
) -> None:
    from ..inputs import sources
    from .options import matching

    try:
        name = show_target(words, "preset")
        known = sorted(sources.list_presets(presets_dir))
        shown = (words or [])[:1] == ["show"]  # `show NAME`: that one, by its exact name
        picked = None if name is None or shown else matching(name, known)
        if picked == []:  # neither a name nor a pattern that picks one: say so, with suggestions
            sources.load_preset(str(name), presets_dir)
        if name is None or picked:
            names = known if name is None else picked or []
            models = [sources.load_preset(n, presets_dir) for n in names]
            name = None
        else:
            model = sources.load_preset(name, presets_dir)
    except ShapecalcError as e:
        fail(e)
    if as_json:  # the fields as a config file takes them (None: the default)
        emit_json([m.model_dump() for m in models] if name is None else model.model_dump())
        return
    from ..render.presets import print_model, print_presets

    if name is None:
        print_presets([(n, m, _params(m)) for n, m in zip(names, models, strict=True)])
    else:
        print_model(model, _params(model))


@functools.lru_cache(maxsize=512)  # a model record is hashable; `presets` lists them all
def _params(model: Any) -> int:
    from ..costs.trace import build_trace
    from ..model.config import Workload
    from ..model.quant import source_fields

    wl = Workload(batch=1, seq=1, **source_fields(model, {}))  # a checkpoint's own dtype
    return int(build_trace(model, wl)["totals"]["params"])


@app.command(help="Print the JSON Schema of one output (`shapecalc schema fit`), or list them.")
def schema(
    which: Annotated[
        str | None, typer.Argument(help="a schema's name (shapecalc schema lists them)")
    ] = None,
    all_: Annotated[bool, typer.Option("--all", help="every schema in one JSON object")] = False,
    json_: Annotated[bool, typer.Option("--json", help="the list as JSON")] = False,
) -> None:
    from .schemas import SCHEMAS, schemas
    from .schemas import schema as one

    if which is not None and all_:
        fail(ShapecalcError("all", "prints every schema; give a NAME or --all, not both"))
    if which is not None:
        if which not in SCHEMAS:
            fail(ShapecalcError("schema", f"unknown schema {which!r}; known: {', '.join(SCHEMAS)}"))
        emit_json(one(which))
    elif all_:
        emit_json(schemas())
    elif json_:
        emit_json({name: what for name, (what, _) in SCHEMAS.items()})
    else:
        width = max(map(len, SCHEMAS))
        print("\n".join(f"{name:<{width}}  {what}" for name, (what, _) in SCHEMAS.items()))
        print("\nshapecalc schema NAME prints one; --all prints every one.")


SHELLS = ("bash", "zsh", "fish", "powershell", "pwsh")
COMPLETE_VAR = "_SHAPECALC_COMPLETE"  # set by the completion script when the shell asks
# the commands that run the NumPy executor, whose matrix products BLAS threads speed up
BLAS_COMMANDS = ("verify", "explain")


@app.command(help="Print the shell completion script for bash, zsh, fish or PowerShell: "
             "`eval \"$(shapecalc completion bash)\"` in ~/.bashrc (zsh alike); fish: "
             "`shapecalc completion fish > ~/.config/fish/completions/shapecalc.fish`. It "
             "completes commands, options and preset names.")
def completion(
    shell: Annotated[str, typer.Argument(help=" | ".join(SHELLS))],
) -> None:
    if shell not in SHELLS:
        fail(ShapecalcError("shell", f"unknown shell {shell!r}; known: {', '.join(SHELLS)}"))
    from typer.completion import completion_init, get_completion_script

    completion_init()
    print(get_completion_script(prog_name="shapecalc", complete_var=COMPLETE_VAR, shell=shell))


# Commands in their own modules, loaded when used.
lazy.register(app)


def _complete() -> None:
    """Answer the shell's completion request: the lazy commands' real options are loaded here, so
    that `shapecalc fit --g<TAB>` completes as `shapecalc trace --s<TAB>` does."""
    from typer.completion import completion_init

    completion_init()
    group = helptext.escape_tree(typer.main.get_command(app))
    for name in lazy.COMMANDS:
        group.commands[name] = lazy.command(name)  # type: ignore[attr-defined]
    group.main(prog_name="shapecalc", complete_var=COMPLETE_VAR)


def _one_command(name: str) -> Any:
    """The click command `name` alone, or None when argv names none (the root's --help, its
    --version, a typo): typer would otherwise turn every command's signature into options on
    each start, a cost that `trace --json` in a loop pays every time."""
    if name in lazy.COMMANDS:
        return lazy.command(name)
    for info in app.registered_commands:
        if info.callback is not None and (info.name or info.callback.__name__) == name:
            sub = typer.Typer(add_completion=False, pretty_exceptions_enable=False,
                              context_settings=helptext.HELP_OPTIONS)
            sub.registered_commands = [info]
            return helptext.escape_tree(typer.main.get_command(sub))
    return None


def main() -> None:
    """Entry point: usage errors become one line on stderr and exit code 2."""
    from typer.core import _click  # typer vendors click; its errors are click's

    from .streams import error_line, guarded

    # At exit the interpreter collects garbage once more, walking every object of every module
    # (~8% of `trace --json`'s instructions): frozen, they are skipped; refcounting still frees what
    # the modules hold, and the command's files are closed and committed before this runs.
    atexit.unregister(gc.freeze)  # once, however often main() runs in one process
    atexit.register(gc.freeze)
    if COMPLETE_VAR in os.environ:
        _complete()
    if len(sys.argv) == 1:  # bare `shapecalc`: the commands, as --help lists them
        sys.argv.append("--help")
    if sys.argv[1] not in BLAS_COMMANDS:
        # NumPy's OpenBLAS starts a thread a core, which spin as it loads: ~0.1 CPU-s of every
        # command that imports NumPy (a sweep's 7%), for no gain where no large matrix is
        # multiplied (set before NumPy loads; a value the user set is kept)
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    one = _one_command(sys.argv[1])
    try:
        # help texts escaped once (cli/helptext.py), so rich markup cannot eat `[m,k]`
        if one is None:
            code = guarded(lambda: helptext.escape_tree(typer.main.get_command(app))(
                standalone_mode=False))
        else:
            code = guarded(lambda: one.main(args=sys.argv[2:], prog_name=f"shapecalc {sys.argv[1]}",
                                            standalone_mode=False))
    except _click.exceptions.ClickException as e:
        error_line(e.format_message().replace("\n", " "))
        sys.exit(2)
    except typer.Abort:
        sys.exit(130)
    sys.exit(code if isinstance(code, int) else 0)
