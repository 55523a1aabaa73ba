"""The optional extras: what each command needs beyond a core install (``pip install skillrise-gym``: the
envs' layer, gymnasium and numpy), checked before it is used, so a missing piece is one line naming the extra
instead of a traceback (`require`)."""

from __future__ import annotations

import importlib.util

from skillrise_gym.backends.base import MissingDependencyError

#: extra -> the modules it brings that commands check for (pyproject.toml's [project.optional-dependencies])
EXTRAS = {"bench": ("tqdm", "matplotlib", "openai"), "train": ("torch", "transformers", "trl", "peft", "accelerate")}
#: the engine extras' modules (what an env of that benchmark imports to play)
ENGINE_MODULES = {"alfworld": ("alfworld", "textworld"), "scienceworld": ("scienceworld",),
                  "webshop": ("bm25s", "rapidfuzz")}


def missing(modules: tuple[str, ...] | list[str]) -> list[str]:
    return [m for m in modules if importlib.util.find_spec(m) is None]


def require(extra: str, modules: tuple[str, ...] | list[str], what: str, instead: str = "") -> None:
    """Raise MissingDependencyError, one line, when a module `what` needs is not installed: it names the
    modules, the extra that brings them and (`instead`) the flag that does without."""
    absent = missing(modules)
    if absent:
        raise MissingDependencyError(f"{what} needs {', '.join(absent)}, from the {extra} extra: pip install "
                                     f"'skillrise-gym[{extra}]'" + (f" ({instead})" if instead else ""))
