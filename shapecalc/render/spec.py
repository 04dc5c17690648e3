"""serve's `speculative` section (serve/specsched.doc): the settings, the draft, the simulated
tokens a step, and the step at every batch size with its regime."""

from __future__ import annotations

from typing import Any


def print_spec(s: dict[str, Any], console: Any, t: Any, n: Any) -> None:
    from .layout import split_table

    acc = s["acceptance"]
    alpha = f"α={acc[0]:.3g}" if len(set(acc)) == 1 else "α=" + ",".join(f"{a:.3g}" for a in acc)
    sim = s["simulated_tokens_per_step"]
    console.print(f"speculative: {s['draft']} ({s['draft_model']}), k={s['k']}, {alpha} "
                  f"({s['acceptance_source']}): {s['expected_tokens_per_step']:.4g} tokens a "
                  f"step expected, {'—' if sim is None else f'{sim:.4g}'} simulated; draft "
                  f"{s['draft_weight_bytes_per_rank']:,} weight bytes and "
                  f"{s['draft_kv_bytes_per_token_per_rank']:,} KV bytes a token per rank",
                  markup=False, crop=False, soft_wrap=True)
    up = s["speedup_at_mean_batch"]
    console.print(f"this run: {s['mean_decode_batch']:.3g} sequences a decode step on average, "
                  f"{s['regime']}: speculation {'helps' if up > 1 else 'costs'} ({up:.2f}× "
                  "the plain tokens/s there)", markup=False, crop=False, soft_wrap=True)
    rows = [[str(r["batch"]), t(r["itl_s"]), t(r["spec_itl_s"]), t(r["spec_tpot_s"]),
             n(r["tokens_per_s"]), n(r["spec_tokens_per_s"]), f"{r['speedup']:.2f}×",
             r["regime"] + (", helps" if r["speedup"] > 1 else ", costs")]
            for r in s["by_batch"]]
    split_table(console, ["batch", "ITL", "ITL spec", "TPOT spec", "tok/s", "tok/s spec",
                          "speedup", "the verify"], rows, 1,
                f"speculation by batch size (a decode step on {s['context_tokens']:,} cached "
                "tokens; ITL and tok/s plain)", right=[True] * 7 + [False])
