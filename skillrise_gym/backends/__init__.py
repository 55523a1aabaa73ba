"""Backends by name. Engines are imported only when a backend is made, so `import skillrise_gym` stays light."""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

from skillrise_gym.backends.base import (
    Backend,
    DataNotFoundError,
    EngineError,
    MissingDependencyError,
    SkillRiseError,
    StepResult,
)

#: name -> ("module:Class", optional extra that installs its engine)
BACKENDS: dict[str, tuple[str, str | None]] = {
    "alfworld": ("skillrise_gym.backends.alfworld:ALFWorldBackend", "alfworld"),
    "webshop": ("skillrise_gym.backends.webshop:WebShopBackend", "webshop"),
    "scienceworld": ("skillrise_gym.backends.scienceworld:ScienceWorldBackend", "scienceworld"),
    # The transfer probe: generated families of hidden rules (no data files, no engine to install).
    "rulebook": ("skillrise_gym.backends.rulebook:RulebookBackend", None),
    # A tiny deterministic engine for unit tests of the layers above the backends, and for debugging.
    "toy": ("skillrise_gym.backends.toy:ToyBackend", None),
}


def backend_class(name: str) -> type[Backend]:
    """The backend class registered under `name` (imports its module, not its engine)."""
    try:
        target, _extra = BACKENDS[name]
    except KeyError:
        raise ValueError(f"unknown backend {name!r}; known backends: {', '.join(BACKENDS)}") from None
    module_name, class_name = target.split(":")
    return getattr(importlib.import_module(module_name), class_name)


def make_backend(name: str, **options: Any) -> Backend:
    """Instantiate a backend by name with its options."""
    return backend_class(name)(**options)


def require(module: str, extra: str, what: str) -> None:
    """Raise MissingDependencyError naming the extra to install when `module` cannot be imported."""
    if importlib.util.find_spec(module) is None:
        raise MissingDependencyError(
            f"{what} needs the '{module}' package, which is not installed. "
            f"Install it with: pip install 'skillrise-gym[{extra}]'"
        )


__all__ = [
    "BACKENDS",
    "Backend",
    "DataNotFoundError",
    "EngineError",
    "MissingDependencyError",
    "SkillRiseError",
    "StepResult",
    "backend_class",
    "make_backend",
    "require",
]
