"""Reference tables generated from the code, not from results: every `skillrise-train` flag with its default
and help, from `TrainConfig` itself (the CLI is generated from the same fields), so the docs' list of flags
cannot drift from `skillrise-train --help`."""

from __future__ import annotations

import dataclasses
import json

from .core import Results, markdown_table, table


def _default(value) -> str:
    if value is dataclasses.MISSING:
        return "(required)"
    if isinstance(value, bool):
        return "on" if value else "off"
    if value is None:
        return "unset"
    if isinstance(value, (dict, list)):
        return f"`{json.dumps(value)}`"
    return f"`{value}`"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


@table("reference/train-flags")
def train_flags(results: Results) -> str:
    from skillrise_gym.cli_fields import default_of, flag_fields, flag_name
    from skillrise_train.config import TrainConfig

    rows = []
    for f in flag_fields(TrainConfig):
        name, default = flag_name(f), default_of(f)
        if isinstance(default, bool) and f.metadata.get("flag"):  # one switch (--no-progress): off unless given
            default = False
        elif isinstance(default, bool) and default is True:
            name = f"{name} / --no-{name[2:]}"
        rows.append([f"`{name}`", _default(default), _cell(f.metadata["help"])])
    return (markdown_table(["flag", "default", "what it sets"], rows) + "\n\n"
            "*Generated from `skillrise_train.config.TrainConfig` by `scripts/render_results.py` (the fields the CLI is "
            "built from; `skillrise-train --help` prints the same).*")
