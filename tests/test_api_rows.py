"""The API's sweep rows, made a column at a time (api._rows), are the rows `SweepRow.model_validate`
makes of each row's dict: the same fields in the same order, values of the same types, the same
set of given keys, each row with its own. No timing here: benchmarks/bench_api.py measures the
speed."""

from __future__ import annotations

from typing import Any

import pytest

import shapecalc
from shapecalc import api
from shapecalc.plan import sweep as sweeping
from shapecalc.plan.cases import parse_case
from shapecalc.plan.options import PlanOptions
from shapecalc.plan.schemas import SweepRow


def chunks(case: str, gpu: str | None, price: float | None = None, **axes: Any) -> list[Any]:
    given = api._axes(dict(axes))
    hw = shapecalc.load_gpu(gpu) if gpu else None
    grids = sweeping.sweep_grids([parse_case(case)], given, ["prefill", "decode"], {}, hw,
                                 PlanOptions(price=price))
    return [c for g in grids for c in g.chunks()]


def validated(chunk: Any) -> list[SweepRow]:
    """The rows one by one through pydantic, as the API made them before (the reference)."""
    cols = {k: [None if x != x else x for x in v.tolist()] if v.dtype.kind == "f" else v.tolist()
            for k, v in chunk.columns.items()}  # NaN is None (JSON's null)
    return [SweepRow.model_validate({"case": chunk.case, "model": chunk.model,
                                     **dict(zip(cols, values, strict=True))})
            for values in zip(*cols.values(), strict=True)]


def same(a: SweepRow, b: SweepRow) -> bool:
    return (list(a.__dict__) == list(b.__dict__)
            and all(type(x) is type(y) and (x == y or (x != x and y != y))
                    for x, y in zip(a.__dict__.values(), b.__dict__.values(), strict=True))
            and a.model_fields_set == b.model_fields_set
            and a.__pydantic_extra__ == b.__pydantic_extra__
            and a.__pydantic_private__ == b.__pydantic_private__
            and a.model_dump(mode="json", exclude_unset=True)
            == b.model_dump(mode="json", exclude_unset=True))


GRIDS = [
    # the fit and time columns; fp8 on an A100 (no fp8 peak: NaN times, written None)
    ("llama2-70b", "a100-80gb", None, {"batch": "1..32x2", "seq": "128..8192x2", "tp": "2,8",
                                       "dtype": "bf16,fp8"}),
    # decode beyond a learned position table (NaN → None), seq skipped past it
    ("gpt2", "h100-sxm", None, {"batch": "1,3", "seq": "512,1024"}),
    # no GPU: the fit keys unset; dtypes and kv dtypes as columns
    ("llama3-8b", None, None, {"batch": "1,7", "seq": "16,300", "dtype": "bf16,fp8",
                               "kv_dtype": "bf16,int4"}),
    # with a price: every key given; a sliding-window model's regimes
    ("gpt-oss-120b", "h100-sxm", 2.5, {"batch": "1,64", "seq": "64,200,5000", "tp": "1,8"}),
    # values past int64 (object columns of Python ints)
    ("llama3-70b", "h100-sxm", None, {"batch": "1,4096", "seq": "1024,1000000", "tp": "8"}),
    # one row: no column of more than one value
    ("gpt2", "h100-sxm", None, {"batch": "1", "seq": "128"}),
]


@pytest.mark.parametrize(("case", "gpu", "price", "axes"), GRIDS)
def test_rows_are_the_validated_rows(case, gpu, price, axes):
    for chunk in chunks(case, gpu, price, **axes):
        fast, slow = list(api._rows(chunk)), validated(chunk)
        assert len(fast) == len(slow) == len(chunk)
        for a, b in zip(fast, slow, strict=True):
            assert type(a) is SweepRow and same(a, b), (a, b)


def test_each_row_has_its_own_dict_and_given_keys():
    rows = list(shapecalc.sweep("llama3-8b", "h100-sxm", batch="1..64x2"))
    assert len({id(r.__dict__) for r in rows}) == len({id(r.model_fields_set) for r in rows})
    assert len({id(r.model_fields_set) for r in rows}) == len(rows)
    rows[3].cost_per_million_tokens = 1.0  # unset before: given in that row only
    assert "cost_per_million_tokens" in rows[3].model_dump(exclude_unset=True)
    assert all("cost_per_million_tokens" not in r.model_dump(exclude_unset=True)
               for i, r in enumerate(rows) if i != 3)


def test_both_phases_plan_as_each_phase_alone():
    """The fit columns of the decode points reuse the prefill points' plan (plan/sweep.py's
    memo across a phase's chunks): the same rows as each phase swept alone."""
    kw = {"batch": "1..16x2", "seq": "128,4096", "tp": "1,2"}
    both = shapecalc.sweep("llama3-8b", "h100-sxm", phase="prefill,decode", **kw)
    alone = [r for ph in ("prefill", "decode")
             for r in shapecalc.sweep("llama3-8b", "h100-sxm", phase=ph, **kw)]
    dump = [r.model_dump(mode="json", exclude_unset=True) for r in alone]
    assert [r.model_dump(mode="json", exclude_unset=True) for r in both] == dump
