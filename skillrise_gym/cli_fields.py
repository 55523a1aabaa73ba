"""Command-line flags from a config dataclass's fields, so a flag's default, type and help are stated once, on
its field (as the trainer's `TrainConfig` does with HfArgumentParser; skillrise_gym does not import the trainer):

    @dataclass
    class Config:
        out: str = option(help="run directory")                      # no default: a required flag
        K: list[int] = option([1, 2], "sequence lengths")            # --K K [K ...], type int
        workers: int | None = option(None, "worker processes")       # --workers WORKERS, type int
        progress: bool = option(True, "no progress bar", flag="--no-progress")  # store_false
        attempts: int = option(2, "plays of a lost sequence", cli=False)          # no flag

    add_arguments(parser, Config, ["out", "K", "workers", "progress"])
    config = Config(**field_values(parser.parse_args(), Config))

The flag is ``--`` and the field's name with ``-`` for ``_`` unless `flag` names it. The type comes from the
annotation (``X | None`` is X): ``list[X]`` takes one or more values (``nargs="+"``), a bool is a switch
(default False: store_true; default True: store_false, under a `flag` such as ``--no-progress``). `parse`
turns the parsed value into the field's (e.g. KEY=VALUE strings into a dict), applied by `field_values`.
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from typing import Any, Callable, Iterable, Sequence

_MISSING = dataclasses.MISSING


def option(default: Any = _MISSING, help: str = "", *, flag: str | None = None, metavar: str | None = None,
           choices: Sequence[Any] | None = None, action: str | None = None,
           parse: Callable[[Any], Any] | None = None, cli: bool = True) -> Any:
    """A config field with its command-line flag (see the module docstring). No `default`: a required flag; a
    list or dict default is copied for each instance. `cli=False`: a field without a flag."""
    metadata = {"help": help, "flag": flag, "metavar": metavar, "choices": choices, "action": action,
                "parse": parse, "cli": cli}
    if default is _MISSING:
        return dataclasses.field(metadata=metadata)
    if isinstance(default, (dict, list)):
        kind = type(default)
        return dataclasses.field(default_factory=lambda: kind(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def flag_fields(cls: type) -> list[dataclasses.Field]:
    """The fields of dataclass `cls` that have a flag, in their order."""
    return [f for f in dataclasses.fields(cls) if f.init and f.metadata.get("cli", True) and "help" in f.metadata]


def flag_name(f: dataclasses.Field) -> str:
    return f.metadata.get("flag") or "--" + f.name.replace("_", "-")


def default_of(f: dataclasses.Field) -> Any:
    """A field's default (a fresh one from its factory), or `dataclasses.MISSING` when it has none."""
    if f.default_factory is not _MISSING:  # type: ignore[misc]
        return f.default_factory()  # type: ignore[misc]
    return f.default


def add_arguments(container: Any, cls: type, names: Iterable[str]) -> None:
    """Add the flags of `cls`'s fields `names`, in that order, to `container` (a parser or an argument group).
    Each parses into the field's name."""
    by_name = {f.name: f for f in flag_fields(cls)}
    hints = typing.get_type_hints(cls)
    for name in names:
        if name not in by_name:
            raise ValueError(f"{cls.__name__}.{name} is not a field with a flag")
        f = by_name[name]
        meta = f.metadata
        kind, many = _flag_type(hints[name])
        kwargs: dict[str, Any] = {"dest": name, "help": meta["help"]}
        default = default_of(f)
        if kind is bool:
            if default is True and not meta.get("flag"):
                raise ValueError(f"{cls.__name__}.{name}: a switch that defaults to True needs a flag (--no-...)")
            kwargs["action"] = "store_false" if default is True else "store_true"
            container.add_argument(flag_name(f), **kwargs)
            continue
        if default is _MISSING:
            kwargs["required"] = True
        elif meta.get("action") == "append":
            kwargs["default"] = []  # each use adds one; `parse` makes the field's value of them
        else:
            kwargs["default"] = default
        if meta.get("action"):
            kwargs["action"] = meta["action"]
        if kind not in (str, None):
            kwargs["type"] = kind
        if many:
            kwargs["nargs"] = "+"
        for key in ("metavar", "choices"):
            if meta.get(key) is not None:
                kwargs[key] = list(meta[key]) if key == "choices" else meta[key]
        container.add_argument(flag_name(f), **kwargs)


def field_values(namespace: argparse.Namespace, cls: type) -> dict[str, Any]:
    """{field: value} of `cls`'s flags in parsed arguments (each through its field's `parse`)."""
    values = {}
    for f in flag_fields(cls):
        value = getattr(namespace, f.name)
        parse = f.metadata.get("parse")
        values[f.name] = parse(value) if parse is not None else value
    return values


def _flag_type(hint: Any) -> tuple[Any, bool]:
    """(the type a flag's values have, whether it takes several) of a field annotation: ``X | None`` is X,
    ``list[X]`` is (X, True); a dict or another container is (None, False) (its `parse` makes it)."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) != 1:
            raise TypeError(f"cannot make a flag of {hint!r}")
        return _flag_type(args[0])
    if origin is list:
        (item,) = typing.get_args(hint) or (str,)
        return item, True
    if origin is not None or hint is dict:
        return None, False
    return hint, False
