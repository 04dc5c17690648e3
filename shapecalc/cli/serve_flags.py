"""serve's flags checked against each other before anything runs: every one is used or refused
(one line naming it). A flag whose default is a value (`--arrivals poisson`, `--router
round-robin`, `--seed 0`) is refused where it does not apply only when the user typed it
(cli/once.given)."""

from __future__ import annotations

from typing import Any

from ..model.config import ShapecalcError
from .once import given


def check(*, trace: Any, rate: float | None, concurrency: int | None, arrivals: str,
          router: str, replicas: int, pd: str | None, find_rate: bool, find_gpus: bool,
          find_pd: bool, prompt: str | None, output_tokens: str | None,
          requests: int | None) -> None:
    """The workload's flags (arrivals, their shape, the requests, the router) and the searches."""
    from ..serve.sim import ROUTERS

    # the gaps' shape applies only to open-loop arrivals at a rate: a trace or a closed loop
    # (--concurrency) fixes them, and without --rate every request arrives at t = 0
    if given("arrivals") or arrivals.strip().lower() != "poisson":
        if trace is not None:
            raise ShapecalcError("arrivals", "a trace fixes the arrivals; leave out --arrivals")
        if rate is None and not find_rate:
            raise ShapecalcError("arrivals", "shapes the gaps of --rate (or --find-rate's "
                                 "probes); give --rate")
    if router not in ROUTERS:  # up front: a search would try it on each candidate
        raise ShapecalcError("router", f"{router!r} is not one of {', '.join(ROUTERS)}")
    if given("router") and replicas == 1 and pd is None and not (find_gpus or find_pd):
        raise ShapecalcError("router", "routes requests between replicas; one replica has "
                             "nothing to route: give --replicas N or leave out --router")
    if trace is not None and (rate is not None or concurrency is not None):
        raise ShapecalcError("trace", "fixes the arrivals; leave out --rate and --concurrency")
    for flag, v in (("--prompt-tokens", prompt), ("--output-tokens", output_tokens),
                    ("--requests", requests)):
        if trace is not None and v is not None:
            raise ShapecalcError("trace", f"fixes the requests; leave out {flag}")
    if (find_rate or find_gpus) and concurrency is not None:
        raise ShapecalcError("concurrency", "--find-rate and --find-gpus probe open-loop "
                             "rates; leave out --concurrency")
    if find_rate and rate is not None:
        raise ShapecalcError("rate", "--find-rate searches the rate; leave out --rate")
    if find_gpus and replicas != 1:
        raise ShapecalcError("replicas", "--find-gpus searches the replicas; leave out "
                             "--replicas")
    if find_gpus and rate is None:
        raise ShapecalcError("rate", "--find-gpus needs --rate")
    if trace is not None and (find_rate or find_gpus):
        raise ShapecalcError("trace", "--find-rate and --find-gpus draw their own workload "
                             "(--prompt-tokens, --output-tokens); a trace fixes the arrivals")


def check_seed(drawn: bool) -> None:
    """The seed draws arrivals at a rate (a search's probes too), lengths from a distribution
    and speculative acceptances: where none is drawn it would change nothing."""
    if given("seed") and not drawn:
        raise ShapecalcError("seed", "seeds the random draws (arrivals at a --rate, lengths "
                             "from a distribution, speculative acceptances); none is drawn "
                             "here: leave out --seed")
