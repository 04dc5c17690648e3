"""Tensors as stored in a dtype: bf16 as its top 16 bits, int8/fp8/int4 as integer codes with a
fixed scale (int4 packed two a byte), so that measured bytes are `.nbytes` of real arrays."""

from __future__ import annotations

import mmap
from typing import Any

import numpy as np

# Integer KV caches store round(x / scale) with one fixed scale, so a prefill of T tokens and of
# T+1 tokens quantize the shared tokens identically (decode == full forward still holds).
QSCALE = {"int8": 1 / 32, "fp8": 1 / 32, "int4": 1 / 2}
_MADV_POPULATE_WRITE = 23  # Linux ≥ 5.14


def encode(a: np.ndarray, dtype: str) -> np.ndarray:
    """`a` as stored in `dtype`: bf16 really as the top 16 bits (round to nearest even), int8/fp8/
    int4 as integer codes (NumPy has no fp8; an int8 code has its size)."""
    with np.errstate(all="ignore"):
        if dtype == "fp32":
            return a.astype(np.float32, copy=False)
        if dtype == "fp16":
            return a.astype(np.float16)
        if dtype == "bf16":
            u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
            return ((u + (0x7FFF + ((u >> 16) & 1))) >> 16).astype(np.uint16)
        if dtype == "int64":
            return a.astype(np.int64, copy=False)
        lim = 7 if dtype == "int4" else 127
        q = np.rint(a * (1 / QSCALE[dtype]))
        np.clip(q, -lim - 1, lim, out=q)
        return q.astype(np.int8)


def decode(codes: np.ndarray, dtype: str, out: Any) -> np.ndarray:
    if dtype in ("fp32", "fp16"):
        return codes.astype(out, copy=False)
    if dtype == "bf16":
        return (codes.astype(np.uint32) << 16).view(np.float32).astype(out, copy=False)
    return codes.astype(out) * out(QSCALE[dtype])


def pack_int4(codes: np.ndarray) -> np.ndarray:
    """Two 4-bit codes per byte, as an int4 tensor is stored (odd counts round up)."""
    u = (codes.ravel() & 0xF).astype(np.uint8)
    if u.size % 2:
        u = np.append(u, np.uint8(0))
    return u[0::2] | (u[1::2] << 4)


def stored_nbytes(codes: np.ndarray, dtype: str) -> int:
    return int(pack_int4(codes).nbytes if dtype == "int4" else codes.nbytes)


def measure(a: np.ndarray, dtype: str) -> int:
    """Bytes of `a` once converted to `dtype`, from the converted array's `.nbytes`."""
    return stored_nbytes(encode(a, dtype), dtype)


def alloc(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """An empty array. Big ones are mapped with huge pages and populated in one call: faulting
    4 KiB pages one by one costs more than filling them (several seconds for a 70B layer)."""
    n = int(np.prod(shape)) * np.dtype(dtype).itemsize
    if n < 1 << 26 or not hasattr(mmap, "MADV_HUGEPAGE"):
        return np.empty(shape, dtype)
    m = mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        m.madvise(mmap.MADV_HUGEPAGE)
        m.madvise(_MADV_POPULATE_WRITE)
    except OSError:  # an older kernel: the fill faults the pages in
        pass
    return np.frombuffer(m, dtype=dtype).reshape(shape)


