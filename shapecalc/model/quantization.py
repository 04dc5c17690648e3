"""Quantized weights as checkpoints store them: the formats, and the tensors one weight matrix
becomes in each — data, scales and zeros, with their shapes and storage dtypes.

The one home of the byte formulas (README, "Quantized checkpoints"). A matrix is [out, in] (a
Hugging Face Linear's weight), E of them for routed experts. Blocks and groups run along `in`
(fp8 blocks along both); ⌈·⌉ at the edges, as the checkpoints store a partial block.
Stdlib and records only: the model's tensors are enumerated in quant.py.
"""

from __future__ import annotations

import json
from typing import Literal

from .errors import ShapecalcError
from .record import Pos, Record, _doc, _req

FORMATS = ("fp8-block", "mxfp4", "nvfp4", "gptq", "awq", "bnb-nf4", "bnb-int8")
Format = Literal["fp8-block", "mxfp4", "nvfp4", "gptq", "awq", "bnb-nf4", "bnb-int8"]
# bytes per stored element (packed 4-bit values are stored as uint8, two to a byte)
ELEMENT_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8-e4m3": 1, "e8m0": 1, "uint8": 1,
                 "int8": 1, "int32": 4}
TORCH_NAMES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}  # bitsandbytes' JSON
MX_BLOCK, NV_BLOCK, NF4_BLOCK, NESTED_BLOCK = 32, 16, 64, 256  # OCP MX, NVFP4, bitsandbytes
# bitsandbytes writes the double-quantized absmax's mean (nested_offset) into the quant_state
# JSON with Python's repr: its length depends on the value (a float32 mean: ~20 characters).
# The only byte count here that the config cannot fix; the README says so.
OFFSET_CHARS = 20


class Quantization(Record):
    """A checkpoint's `quantization_config`, as a preset declares it (README, Quantized
    checkpoints). `keep` lists module names left at the `wide` width (Hugging Face's
    modules_to_not_convert / ignore / exclude_modules, matched as transformers matches them)."""

    format: Format = _req("fp8-block | mxfp4 | nvfp4 | gptq | awq | bnb-nf4 | bnb-int8")
    bits: Pos | None = _doc(None, "gptq and awq: bits per weight (4; gptq also 8)")
    group_size: Pos | None = _doc(
        None, "gptq and awq: weights per scale along the input width (null: the whole row)")
    block: tuple[Pos, ...] | None = _doc(
        None, "fp8-block: [out, in] of a scale block (null: one scale per tensor)")
    scale_dtype: Literal["fp32", "bf16", "e8m0"] = _doc(
        "fp32", "fp8-block: the scale_inv dtype (DeepSeek's fp32; ue8m0 scale_fmt: e8m0)")
    static_activations: bool = _doc(
        False, "fp8-block: activation_scheme static adds an fp32 activation scale per matrix")
    kv_scales: bool = _doc(False, "nvfp4: fp32 k_scale and v_scale per layer (fp8 KV cache)")
    double_quant: bool = _doc(True, "bnb-nf4: the absmax quantized again in 256-blocks")
    sym: bool = _doc(True, "gptq: symmetric (qzeros are stored either way)")
    desc_act: bool = _doc(False, "gptq: act-order (g_idx is stored either way)")
    lm_head: bool = _doc(False, "gptq: the LM head is quantized too")
    keep: tuple[str, ...] = _doc((), "modules left unquantized, as the config names them")
    wide: Literal["bf16", "fp16", "fp32"] = _doc(
        "bf16", "the width of what is not quantized (the config's torch_dtype)")

    def _check(self) -> None:
        f = self.format
        if f in ("gptq", "awq"):
            if self.bits is None:
                raise ShapecalcError("quantization.bits", f"{f} needs its bits")
            ok = (4, 8) if f == "gptq" else (4,)
            if self.bits not in ok:
                raise ShapecalcError("quantization.bits", f"{self.bits}-bit {f} is not read "
                                     f"(shapecalc reads {' and '.join(map(str, ok))} bits)")
        elif self.bits is not None:
            raise ShapecalcError("quantization.bits", f"applies to gptq and awq, not {f}")
        if self.group_size is not None and f not in ("gptq", "awq"):
            raise ShapecalcError("quantization.group_size",
                                 f"applies to gptq and awq; {f}'s block is fixed")
        if self.block is not None:
            if f != "fp8-block":
                raise ShapecalcError("quantization.block", f"applies to fp8-block, not {f}")
            if len(self.block) != 2:
                raise ShapecalcError("quantization.block", f"{list(self.block)} is not "
                                     "[out, in] (two sizes)")


def dtype_of(q: Quantization) -> str:
    """The dtype name the format's weights take (--dtype, widths.weights)."""
    if q.format in ("gptq", "awq"):
        return f"int{q.bits}"
    return {"fp8-block": "fp8", "mxfp4": "mxfp4", "nvfp4": "nvfp4", "bnb-nf4": "nf4",
            "bnb-int8": "int8"}[q.format]


def label(q: Quantization) -> str:
    """The format named in one line (totals.weight_format)."""
    f = q.format
    if f == "fp8-block":
        how = (f"{q.block[0]}×{q.block[1]} blocks" if q.block else "per tensor")
        return f"fp8-block (e4m3, {how}, {q.scale_dtype} scale_inv)"
    if f in ("gptq", "awq"):
        g = q.group_size or "row"
        return f"{f} (int{q.bits}, group {g}, {q.wide} scales, int32 qzeros)"
    return {"mxfp4": "mxfp4 (e2m1, 32-blocks, e8m0 scales)",
            "nvfp4": "nvfp4 (e2m1, 16-blocks, e4m3 scales, fp32 global and input scales)",
            "bnb-nf4": "bnb-nf4 (64-blocks, absmax" + (
                ", double-quantized" if q.double_quant else "") + ")",
            "bnb-int8": "bnb-int8 (LLM.int8: int8, fp32 row scales SCB)"}[f]


# a stored tensor: (suffix, shape, dtype, part); part is data | scales | zeros | other
Piece = tuple[str, tuple[int, ...], str, str]


def nbytes(shape: tuple[int, ...], dtype: str) -> int:
    n = ELEMENT_BYTES[dtype]
    for d in shape:
        n *= d
    return n


def _div(a: int, b: int) -> int:
    return -(-a // b)


def _fits(key: str, what: str, width: int, size: int, name: str, strict: bool) -> None:
    """A group or block along a width must divide it: the checkpoint has no partial group.
    A rank's shard is not `strict`: a group it cuts counts whole (⌈·⌉), as engines pad it."""
    if strict and width % size:
        raise ShapecalcError(key, f"{what} {size} does not divide the input width {width} of "
                             f"{name}")


def pieces(q: Quantization, name: str, out: int, inp: int, experts: int | None = None,
           strict: bool = True) -> list[Piece]:
    """The tensors one [out, in] weight (E of them: `experts`) is stored as in format `q`.
    `name` says which weight, for the error line of a group or block that does not fit (a
    whole matrix, `strict`; a tensor-parallel shard counts a cut group whole)."""
    e: tuple[int, ...] = () if experts is None else (experts,)
    f = q.format
    if f == "fp8-block":
        w: list[Piece] = [("weight", (*e, out, inp), "fp8-e4m3", "data")]
        if q.block is None:  # per-tensor: one fp32 scale a matrix
            w.append(("weight_scale_inv", e, "fp32", "scales"))
        else:
            bo, bi = q.block
            w.append(("weight_scale_inv", (*e, _div(out, bo), _div(inp, bi)), q.scale_dtype,
                      "scales"))
        if q.static_activations:
            w.append(("activation_scale", e, "fp32", "scales"))
        return w
    if f == "mxfp4":  # gpt-oss: *_blocks [.., out, in/32, 16] uint8 + *_scales e8m0 uint8
        _fits("quantization", "mxfp4's block", inp, MX_BLOCK, name, strict)
        g = _div(inp, MX_BLOCK)
        return [("blocks", (*e, out, g, MX_BLOCK // 2), "uint8", "data"),
                ("scales", (*e, out, g), "uint8", "scales")]
    if f == "nvfp4":  # modelopt: weight uint8 [out, in/2], e4m3 scales per 16, two fp32 scalars
        _fits("quantization", "nvfp4's block", inp, NV_BLOCK, name, strict)
        g = _div(inp, NV_BLOCK)
        return [("weight", (*e, out, g * NV_BLOCK // 2), "uint8", "data"),
                ("weight_scale", (*e, out, g), "fp8-e4m3", "scales"),
                ("weight_scale_2", e, "fp32", "scales"),
                ("input_scale", e, "fp32", "scales")]
    if f in ("gptq", "awq"):
        bits = q.bits or 4
        group = q.group_size or inp
        _fits("quantization.group_size", "group_size", inp, group, name, strict)
        per = 32 // bits  # values per int32
        word = f"{per} {bits}-bit values per int32:"
        g = _div(inp, group)
        if f == "gptq":  # qweight packs along in; qzeros along out
            _fits("quantization.bits", word, inp, per, name, strict)
            _fits("quantization.bits", word, out, per, name + " (its output width)", strict)
            return [("qweight", (*e, _div(inp, per), out), "int32", "data"),
                    ("qzeros", (*e, g, _div(out, per)), "int32", "zeros"),
                    ("scales", (*e, g, out), q.wide, "scales"),
                    ("g_idx", (*e, inp), "int32", "other")]
        # awq (gemm): qweight [in, out/8], qzeros [in/group, out/8], scales [in/group, out]
        _fits("quantization.bits", word, out, per, name + " (its output width)", strict)
        return [("qweight", (*e, inp, _div(out, per)), "int32", "data"),
                ("qzeros", (*e, g, _div(out, per)), "int32", "zeros"),
                ("scales", (*e, g, out), q.wide, "scales")]
    if f == "bnb-nf4":
        # one Params4bit per matrix: E experts store E of each
        return [(s, (*e, *shape), d, part) for s, shape, d, part in _nf4(q, out, inp)]
    # bnb-int8 (LLM.int8): int8 weight, fp32 SCB per output row, a 1-byte weight_format marker
    return [("weight", (*e, out, inp), "int8", "data"), ("SCB", (*e, out), "fp32", "scales"),
            ("weight_format", e, "uint8", "other")]


def _nf4(q: Quantization, out: int, inp: int) -> list[Piece]:
    """bitsandbytes' Params4bit as transformers saves it: the packed weight [⌈n/2⌉, 1], the
    absmax of each 64-block (fp32, or uint8 with double quantization: then the nested absmax of
    each 256 of them, the nested code book), the 16-value code book, and the quant_state JSON."""
    n = out * inp
    blocks = _div(n, NF4_BLOCK)
    state = {"quant_type": "nf4", "blocksize": NF4_BLOCK, "dtype": TORCH_NAMES[q.wide],
             "shape": [out, inp]}
    p: list[Piece] = [("weight", (_div(n, 2), 1), "uint8", "data")]
    if q.double_quant:
        p += [("weight.absmax", (blocks,), "uint8", "scales"),
              ("weight.nested_absmax", (_div(blocks, NESTED_BLOCK),), "fp32", "scales"),
              ("weight.nested_quant_map", (NESTED_BLOCK,), "fp32", "scales")]
        state.update(nested_blocksize=NESTED_BLOCK, nested_dtype="float32", nested_offset=0.0)
    else:
        p.append(("weight.absmax", (blocks,), "fp32", "scales"))
    p.append(("weight.quant_map", (16,), "fp32", "scales"))
    text = json.dumps(state)
    if q.double_quant:  # the offset's digits: OFFSET_CHARS in place of "0.0"
        text = text[: -len("0.0}")] + "x" * OFFSET_CHARS + "}"
    p.append(("weight.quant_state.bitsandbytes__nf4", (len(text.encode()),), "uint8", "other"))
    return p


# the default layout of `--dtype mxfp4 | nvfp4 | nf4` on a model with no quantization_config:
# every matrix of the blocks quantized; embeddings, LM head, routers, norms and biases at bf16
DTYPE_FORMATS = {"mxfp4": Quantization(format="mxfp4"), "nvfp4": Quantization(format="nvfp4"),
                 "nf4": Quantization(format="bnb-nf4")}
