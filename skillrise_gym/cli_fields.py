"""Command-line flags from a config dataclass's fields, so a flag's default, type and help are stated once, on
its field. The one way flags are made here: `skillrise-bench` (`BenchConfig`), `skillrise-train` (`TrainConfig`)
and the experiment presets (`transfer_experiment.py`, benchmarks/) all declare their fields with `option` and lay
their flags out with `add_arguments`, so the same setting has the same name everywhere:

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
annotation (``X | None`` is X; a class such as a dict subclass is called on the text): ``list[X]`` takes one or
more values (``nargs="+"``); a bool is ``--x`` / ``--no-x``, or, under a `flag` such as ``--no-progress``, that
one switch. `parse` turns the parsed value into the field's (e.g. KEY=VALUE strings into a dict), applied by
`field_values`. `aliases`: former names of the flag, still accepted for one release, hidden from --help, and a
warning on stderr names the new one (`renamed` does the same for a flag made by hand).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import types
import typing
from typing import Any, Callable, Iterable, Mapping, Sequence

_MISSING = dataclasses.MISSING


def option(default: Any = _MISSING, help: str = "", *, flag: str | None = None, metavar: str | None = None,
           choices: Sequence[Any] | None = None, action: str | None = None,
           parse: Callable[[Any], Any] | None = None, cli: bool = True, aliases: Sequence[str] = (),
           also: Sequence[str] = ()) -> Any:
    """A config field with its command-line flag (see the module docstring). No `default`: a required flag; a
    list or dict default is copied for each instance. `cli=False`: a field without a flag. `aliases`: the
    flag's former names (hidden; a warning names the new one). `also`: other spellings of the flag, as good as
    its name (shown in --help)."""
    metadata = {"help": help, "flag": flag, "metavar": metavar, "choices": choices, "action": action,
                "parse": parse, "cli": cli, "aliases": tuple(aliases), "also": tuple(also)}
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


def add_arguments(container: Any, cls: type, names: Iterable[str], *, defaults: Mapping[str, Any] | None = None,
                  helps: Mapping[str, str] | None = None, underscores: bool = False) -> None:
    """Add the flags of `cls`'s fields `names`, in that order, to `container` (a parser or an argument group).
    Each parses into the field's name. `defaults` / `helps`: a field's default and help where they are not
    the field's own (e.g. ``argparse.SUPPRESS``, to tell a flag given from one left out); `underscores`: also
    accept ``--field_name`` (hidden), as Hugging Face's and TRL's command lines do."""
    by_name = {f.name: f for f in flag_fields(cls)}
    hints = typing.get_type_hints(cls)
    defaults, helps = defaults or {}, helps or {}
    for name in names:
        if name not in by_name:
            raise ValueError(f"{cls.__name__}.{name} is not a field with a flag")
        f = by_name[name]
        meta = f.metadata
        kind, many = _flag_type(hints[name])
        kwargs: dict[str, Any] = {"dest": name, "help": helps.get(name, meta["help"])}
        default = defaults.get(name, default_of(f))
        hidden = [f"--{name}"] if underscores and "_" in name and not meta.get("flag") else []
        if kind is bool:
            if meta.get("flag"):  # one switch, e.g. --no-progress (sets False where the field defaults to True)
                kwargs["action"] = "store_false" if default_of(f) is True else "store_true"
            else:
                kwargs["action"] = argparse.BooleanOptionalAction
            kwargs["default"] = default
            container.add_argument(flag_name(f), **kwargs)
            _aliases(container, f, kwargs, hidden)
            continue
        if default is _MISSING:
            kwargs["required"] = True
        elif meta.get("action") == "append" and name not in defaults:
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
        container.add_argument(flag_name(f), *meta.get("also", ()), **kwargs)
        _aliases(container, f, kwargs, hidden)


def _aliases(container: Any, f: dataclasses.Field, kwargs: dict[str, Any], hidden: list[str]) -> None:
    """The field's former flag names (they warn) and its underscore spelling (silent), hidden from --help."""
    quiet = {k: v for k, v in kwargs.items() if k not in ("help", "required", "default")}
    for old in f.metadata.get("aliases") or ():
        renamed(container, old, flag_name(f), **quiet)
    for name in hidden:
        container.add_argument(name, **quiet, default=argparse.SUPPRESS, help=argparse.SUPPRESS)


def renamed(container: Any, old: str, new: str, **kwargs: Any) -> None:
    """Accept `old`, a former name of the flag `new` (whose argparse settings `kwargs` are: dest, type,
    nargs...), for one release: hidden from --help, and each use prints a warning naming `new`."""
    base = kwargs.pop("action", None)
    parent: type[argparse.Action]
    if base is None or base == "store":
        parent = argparse._StoreAction
    elif base == "append":
        parent = argparse._AppendAction
    elif base == "store_true":
        parent = argparse._StoreTrueAction
    elif base == "store_false":
        parent = argparse._StoreFalseAction
    elif isinstance(base, type) and issubclass(base, argparse.Action):
        parent = base
    else:
        raise ValueError(f"cannot alias a flag of action {base!r}")

    class Renamed(parent):  # type: ignore[valid-type, misc]
        def __call__(self, parser: argparse.ArgumentParser, namespace: Any, values: Any, option_string: Any = None):
            if not getattr(parser, "quiet_aliases", False):  # a second parse of the same line says it no more
                print(f"{parser.prog}: warning: {old} is now {new}; {old} will be removed in the next release",
                      file=sys.stderr, flush=True)
            super().__call__(parser, namespace, values, option_string)

    container.add_argument(old, action=Renamed, default=argparse.SUPPRESS, help=argparse.SUPPRESS, **kwargs)


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


def given_flags(parser: argparse.ArgumentParser, argv: Sequence[str]) -> set[str]:
    """The destinations of the flags `argv` gives explicitly (whatever their value); `parser` is changed (its
    defaults suppressed), so pass a fresh one."""
    parser.quiet_aliases = True  # type: ignore[attr-defined]  (the first parse warned about renamed flags)
    for action in parser._actions:
        action.default = argparse.SUPPRESS
        action.required = False
    return set(vars(parser.parse_known_args(list(argv))[0]))
