"""Backends by name. Engines are imported only when a backend is made, so `import skillrise_gym` stays light."""

from __future__ import annotations

import collections.abc
import importlib
import importlib.util
import inspect
import math
import os
import types
import typing
from typing import Any

from skillrise_gym.backends.base import (
    ActionGrammar,
    Backend,
    ConfigurationError,
    DataNotFoundError,
    EngineError,
    MissingDependencyError,
    SkillRiseError,
    StepResult,
)
from skillrise_gym.benchmarks import TABLE

#: name -> ("module:Class", optional extra that installs its engine), from `skillrise_gym.benchmarks.TABLE`
BACKENDS: dict[str, tuple[str, str | None]] = {row.name: (row.backend, row.extra) for row in TABLE}


def backend_class(name: str) -> type[Backend]:
    """The backend class registered under `name` (imports its module, not its engine)."""
    try:
        target, _extra = BACKENDS[name]
    except KeyError:
        raise ValueError(f"unknown backend {name!r}; known backends: {', '.join(BACKENDS)}") from None
    module_name, class_name = target.split(":")
    return getattr(importlib.import_module(module_name), class_name)


def make_backend(name: str, **options: Any) -> Backend:
    """Instantiate a backend by name with its options (checked first: `check_options`)."""
    cls = backend_class(name)
    return cls(**check_options(cls, options))


def check_options(backend: str | type[Backend], options: dict[str, Any]) -> dict[str, Any]:
    """`options` if they fit the backend's constructor, else ValueError naming the option, what it must be
    and what it got: no unknown names, each value of its declared type (a bool is not an int and the string
    'False' is not a bool), finite numbers, inside the class's `option_ranges` (inclusive bounds), and
    its `validate_options(options)` when it has one. Runs
    before any engine starts, so `gym.make`, the bench and the trainer refuse bad options at once."""
    cls = backend_class(backend) if isinstance(backend, str) else backend
    if not isinstance(options, dict):
        raise ValueError(f"backend options must be a dict of keyword arguments, got {type(options).__name__}")
    signature = inspect.signature(cls.__init__).parameters
    if any(p.kind is p.VAR_KEYWORD for p in signature.values()):
        return options  # a backend that takes anything checks its own options
    parameters = {name: p for name, p in signature.items()
                  if name != "self" and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    try:
        hints = typing.get_type_hints(cls.__init__)
    except Exception:  # an annotation that cannot be resolved here: check names and ranges only
        hints = {}
    label = getattr(cls, "benchmark", cls.__name__)
    ranges = getattr(cls, "option_ranges", {})
    for name, value in options.items():
        if name not in parameters:
            raise ValueError(f"the {label} backend has no option {name!r}; its options: {', '.join(parameters)}")
        hint = hints.get(name)
        if hint is not None and not _conforms(value, hint):
            raise ValueError(f"{label} option {name} must be {_describe(hint)}, got {value!r} "
                             f"({type(value).__name__})")
        if name in ranges and value is not None and not isinstance(value, (str, bytes)):
            low, high = ranges[name]
            if not low <= value <= high:
                raise ValueError(f"{label} option {name} must be in [{low}, {high}], got {value!r}")
    validate = getattr(cls, "validate_options", None)  # a backend's own value checks (formats, combinations)
    if validate is not None:
        validate(options)
    return options


def _conforms(value: Any, hint: Any) -> bool:
    """Whether `value` fits the annotation `hint` (the simple types backends declare; others pass)."""
    import numpy as np

    if hint is Any:
        return True
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_conforms(value, arg) for arg in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, (bool, np.bool_))
    if hint is int:
        return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))
    if hint is float:
        return (isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))
                and math.isfinite(value))
    if hint is str:
        return isinstance(value, str)
    if hint is os.PathLike:
        return isinstance(value, os.PathLike)
    if origin in (list, tuple, set, frozenset, collections.abc.Sequence, collections.abc.Collection,
                  collections.abc.Iterable):
        if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple, set, frozenset)):
            return False
        args = [a for a in typing.get_args(hint) if a is not Ellipsis]
        return len(args) != 1 or all(_conforms(item, args[0]) for item in value)
    if isinstance(hint, type):
        return isinstance(value, hint)
    return True


def _describe(hint: Any) -> str:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return " or ".join(_describe(arg) for arg in typing.get_args(hint))
    if hint is type(None):
        return "None"
    if typing.get_origin(hint) is not None:
        args = [a for a in typing.get_args(hint) if a is not Ellipsis]
        plural = {str: "strings", int: "integers", float: "numbers", bool: "booleans"}
        return f"a list of {plural.get(args[0], _describe(args[0]))}" if len(args) == 1 else "a list"
    return {bool: "true or false", int: "an integer", float: "a finite number", str: "a string",
            os.PathLike: "a path"}.get(hint, getattr(hint, "__name__", str(hint)))


def require(module: str, extra: str, what: str) -> None:
    """Raise MissingDependencyError naming the extra to install when `module` cannot be imported."""
    if importlib.util.find_spec(module) is None:
        raise MissingDependencyError(
            f"{what} needs the '{module}' package, which is not installed. "
            f"Install it with: pip install 'skillrise-gym[{extra}]'"
        )


__all__ = [
    "BACKENDS",
    "ActionGrammar",
    "Backend",
    "ConfigurationError",
    "DataNotFoundError",
    "EngineError",
    "MissingDependencyError",
    "SkillRiseError",
    "StepResult",
    "backend_class",
    "check_options",
    "make_backend",
    "require",
]
