"""serve's speculative flags → a Speculation (or None), each refusal naming its flag."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..model.config import ModelConfig, ShapecalcError, Workload
from .spec import make_spec

if TYPE_CHECKING:
    from .specsched import Speculation


def speculation(model: ModelConfig, wl: Workload, kind: str | None, preset: str | None,
                config: Path | None, k: int | None, acceptance: str | None, seed: int,
                presets_dir: list[Path] | None) -> Speculation | None:
    spec = make_spec(kind, k, acceptance, seed)
    if spec is None:
        for flag, v in (("draft-preset", preset), ("draft-config", config)):
            if v is not None:
                raise ShapecalcError(flag, "names speculative decoding's draft: give --draft "
                                     "and --spec-k too")
        return None
    # a speculative run only: the draft's and the scheduler's modules (and NumPy) load here
    from .draft import eagle3_draft, model_draft, mtp_draft
    from .specsched import Speculation

    if spec.kind == "draft":
        if preset is not None and config is not None:
            raise ShapecalcError("draft-config", "--draft draft reads one draft model: give "
                                 "--draft-preset or --draft-config, not both")
        if preset is None and config is None:
            raise ShapecalcError("draft-preset", "--draft draft needs one of --draft-preset or "
                                 "--draft-config")
        from ..inputs.model import load_model

        hf = config if config is not None and config.suffix.lower() == ".json" else None
        toml = config if config is not None and hf is None else None
        try:
            dm, _ = load_model(preset, toml, hf, None, presets_dir)
        except ShapecalcError as e:
            flag = "draft-preset" if preset is not None else "draft-config"
            # a field of the draft's own config (`wingspan: unknown field`) stays named
            inner = "" if e.field in ("preset", "config", "hf-config") else f"{e.field}: "
            raise ShapecalcError(flag, inner + e.reason) from None
        draft = model_draft(dm, model, "draft-preset" if preset is not None else "draft-config")
    elif spec.kind == "eagle3":
        if preset is not None:
            raise ShapecalcError("draft-preset", "--draft eagle3 reads an EAGLE-3 head's "
                                 "config.json: give it with --draft-config")
        if config is None:
            raise ShapecalcError("draft-config", "--draft eagle3 needs the head's config.json "
                                 "(e.g. yuhuili/EAGLE3-LLaMA3.1-Instruct-8B's)")
        from ..inputs.files import read_json

        cfg: Any = read_json(config, "draft-config")
        if not isinstance(cfg, dict):
            raise ShapecalcError("draft-config", "an EAGLE-3 config.json is a JSON object")
        draft = eagle3_draft(cfg, model)
    else:
        for flag, v in (("draft-preset", preset), ("draft-config", config)):
            if v is not None:
                raise ShapecalcError(flag, "--draft mtp drafts with the model's own MTP layers: "
                                     "leave it out")
        draft = mtp_draft(model)
    return Speculation(spec, draft)
