"""The results tables of README.md and docs/, one module per topic; importing this package imports every
module in it, which registers its tables (`TABLES`). A table is a function of `Results` (the committed JSON)
returning Markdown; see `core.py` for the helpers every module uses."""

from __future__ import annotations

import importlib
import pkgutil

from .core import TABLES, RenderError, Results, Source, table  # noqa: F401

for _module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    if _module not in ("core", "blocks"):
        importlib.import_module(f"{__name__}.{_module}")
