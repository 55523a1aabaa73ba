"""`EpisodeSpec`: what a policy sees and may answer, as one value.

An episode is made once: by the algorithm for training (`skillrise_train.rollout_setup.training_episode`), by
the bench's flags for a benchmark (`BenchConfig.episode`). Everything that plays it takes its settings from
the value and re-describes nothing: the env's constructor arguments (`env_kwargs`), and how each model call is
framed (`max_new_tokens`, `max_prompt_tokens`, `system_prompt`, `chat_template_kwargs`).

The trainer saves the training episode as ``episode.json`` beside the weights of every checkpoint and of
``final/``; its in-training evaluation plays the same episode on the evaluation split; ``skillrise-bench
--model RUN/final`` reads it (`load`) and plays it unless a flag overrides a field, and then says which
(`differences`). Fields fall in two kinds:

- the *shape* (`SHAPE`): what each prompt holds and what an answer may be (the carry mode, the prompt
  style, the step limit, the engine's options, the call framing). A bench run that changes one of these
  measures another episode than the one trained, and it is stated;
- the *panel* (`PANEL`: split, K, family): which sequences are played. A benchmark chooses its own panel
  (held-out split, other K), which is what it is for; the bench says what the training's was.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from skillrise_gym import prompts

#: the file beside a checkpoint's weights that holds its episode
FILE = "episode.json"
#: the version of that file's layout; a file of a newer version is refused with its name
VERSION = 1

#: fields that choose which sequences are played (a benchmark's own choice)
PANEL = ("split", "K", "family")
#: fields that frame each model call (the agent's settings; the rest are the env's)
FRAMING = ("max_new_tokens", "max_prompt_tokens", "system_prompt", "chat_template_kwargs")


class EpisodeFileError(ValueError):
    """An episode.json that cannot be read as an `EpisodeSpec`; the message names the file."""


@dataclass(frozen=True)
class EpisodeSpec:
    """One episode: the env's settings and the framing of each model call. Every field is resolved (no "auto",
    no None standing for a backend's default), so two specs are equal exactly when they play alike.

    env: the backend name (webshop, alfworld, scienceworld, rulebook, toy).
    split, K, family: the panel (see the module docstring).
    mode: cross (K tasks of a family) or repeat (one task K times).
    carry: skill, none or reflect (`prompts.CARRY_MODES`).
    end_on_success: the episode ends at the first solved task (LaMer's attempts).
    max_task_steps: solve steps allowed per task.
    prompt_style: full or compact (`prompts.STYLES`).
    admissible_actions: observations (and prompts) list the engine's admissible actions.
    backend_options: the backend constructor's keyword arguments.
    max_new_tokens: the longest answer of one call (None: the agent's own budget).
    max_prompt_tokens: the longest prompt in tokens, longer ones lose their middle (None: the agent's own).
    system_prompt: a system message before each prompt (None: none is sent, and a chat template may add its
        own; "": an empty one, which stops templates from injecting theirs).
    chat_template_kwargs: keyword arguments of the tokenizer's chat template (e.g. enable_thinking).
    """

    env: str
    split: str
    K: int
    mode: str = "cross"
    carry: str = "skill"
    end_on_success: bool = False
    max_task_steps: int = 0
    prompt_style: str = "full"
    family: str | None = None
    admissible_actions: bool = True
    backend_options: Mapping[str, Any] = field(default_factory=dict)
    max_new_tokens: int | None = None
    max_prompt_tokens: int | None = None
    system_prompt: str | None = None
    chat_template_kwargs: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        from skillrise_gym.backends import backend_class

        cls = backend_class(self.env)
        cls.check_split(self.split)
        if not isinstance(self.K, int) or self.K < 1:
            raise ValueError(f"K must be an integer >= 1, got {self.K!r}")
        if self.mode not in ("cross", "repeat"):
            raise ValueError(f"mode must be cross or repeat, got {self.mode!r}")
        prompts.check_carry(self.carry, cls.benchmark)
        prompts.check_style(self.prompt_style)
        if not isinstance(self.max_task_steps, int) or self.max_task_steps < 1:
            raise ValueError(f"max_task_steps must be an integer >= 1 (resolved), got {self.max_task_steps!r}")
        for name in ("max_new_tokens", "max_prompt_tokens"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be an integer >= 1 or None, got {value!r}")
        for name in ("end_on_success", "admissible_actions"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")
        # plain dicts, copied: the value cannot change through the caller's mapping
        object.__setattr__(self, "backend_options", dict(self.backend_options or {}))
        object.__setattr__(self, "chat_template_kwargs", dict(self.chat_template_kwargs or {}))

    # ----------------------------------------------------------------- making one
    @classmethod
    def resolve(cls, env: str, K: int, split: str | None = None, *, mode: str = "cross", carry: str = "skill",
                end_on_success: bool = False, max_task_steps: int | None = None, prompt_style: str | None = None,
                family: str | None = None, admissible_actions: bool | None = None,
                backend_options: Mapping[str, Any] | None = None, **framing: Any) -> "EpisodeSpec":
        """A spec with every unset field resolved to the backend's own value (its first split, its step limit,
        its prompt style, whether it lists admissible actions), as `SequenceEnv` would resolve them."""
        from skillrise_gym.backends import backend_class

        backend = backend_class(env)
        return cls(env=env, split=split or backend.splits[0], K=int(K), mode=mode, carry=carry,
                   end_on_success=end_on_success, max_task_steps=int(max_task_steps or backend.default_max_task_steps),
                   prompt_style=prompt_style or backend.prompt_style, family=family,
                   admissible_actions=backend.admissible_by_default if admissible_actions is None
                   else bool(admissible_actions),
                   backend_options=dict(backend_options or {}), **framing)

    def replace(self, **changes: Any) -> "EpisodeSpec":
        return dataclasses.replace(self, **changes)

    # ----------------------------------------------------------------- using one
    def framing(self) -> dict[str, Any]:
        """The call framing fields (`FRAMING`) and their values."""
        return {name: (dict(getattr(self, name)) if name == "chat_template_kwargs" else getattr(self, name))
                for name in FRAMING}

    def env_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of `SequenceEnv` (and of the registered gym ids) that play this episode."""
        return {"K": self.K, "split": self.split, "mode": self.mode, "carry": self.carry,
                "end_on_success": self.end_on_success, "max_task_steps": self.max_task_steps,
                "prompt_style": self.prompt_style, "family": self.family,
                "admissible_actions": self.admissible_actions, "backend_options": dict(self.backend_options)}

    # ----------------------------------------------------------------- comparing
    @classmethod
    def shape_fields(cls) -> tuple[str, ...]:
        """The fields that decide what a prompt holds and what an answer may be (all but the panel)."""
        return tuple(f.name for f in dataclasses.fields(cls) if f.name not in PANEL)

    def differences(self, other: "EpisodeSpec", names: tuple[str, ...] | None = None) -> dict[str, tuple[Any, Any]]:
        """{field: (this value, other's value)} of the fields (default: the shape) in which the two differ."""
        names = self.shape_fields() if names is None else names
        return {n: (getattr(self, n), getattr(other, n)) for n in names if getattr(self, n) != getattr(other, n)}

    # ----------------------------------------------------------------- files
    def to_dict(self) -> dict[str, Any]:
        return {f.name: (dict(v) if isinstance(v, Mapping) else v)
                for f in dataclasses.fields(self) for v in [getattr(self, f.name)]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "the episode") -> "EpisodeSpec":
        """The spec a `to_dict` wrote; an unknown field (a newer version's) or a bad value is an
        `EpisodeFileError` naming `where`."""
        if not isinstance(data, Mapping):
            raise EpisodeFileError(f"{where}: the episode is a {type(data).__name__}, not a JSON object")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise EpisodeFileError(f"{where}: unknown episode field(s) {', '.join(unknown)} (written by a newer "
                                   "skillrise-gym?); upgrade skillrise-gym, or remove the field(s) if you wrote them")
        missing = sorted(f.name for f in dataclasses.fields(cls)
                         if f.name not in data and f.default is dataclasses.MISSING
                         and f.default_factory is dataclasses.MISSING)  # type: ignore[misc]
        if missing:
            raise EpisodeFileError(f"{where}: the episode lacks {', '.join(missing)}")
        try:
            return cls(**dict(data))
        except (TypeError, ValueError) as exc:
            raise EpisodeFileError(f"{where}: {exc}") from None

    def save(self, folder: str | os.PathLike, **notes: Any) -> Path:
        """Write ``folder/episode.json`` (atomically); `notes` are written beside the spec (e.g. the run's
        held-out split) and are not part of it."""
        from skillrise_gym.paths import atomic_write

        path = Path(folder) / FILE
        payload = {"version": VERSION, "episode": self.to_dict(), **notes}
        atomic_write(path, json.dumps(payload, indent=2) + "\n")
        return path


@dataclass(frozen=True)
class SavedEpisode:
    """An episode.json read back: the spec, the file it came from, and the notes saved beside it."""

    spec: EpisodeSpec
    path: Path
    notes: Mapping[str, Any] = field(default_factory=dict)


def episode_file(location: str | os.PathLike) -> Path | None:
    """The episode.json of a model folder (a run's final/ or checkpoint-N/), of a run folder (its final/, else
    its newest checkpoint), or the file itself; None when there is none."""
    path = Path(location).expanduser()
    if path.is_file():
        return path if path.name == FILE or path.suffix == ".json" else None
    if (path / FILE).is_file():
        return path / FILE
    if (path / "final" / FILE).is_file():
        return path / "final" / FILE
    checkpoints = sorted((p for p in path.glob("checkpoint-*") if (p / FILE).is_file()),
                         key=lambda p: int(p.name.split("-")[-1]) if p.name.split("-")[-1].isdigit() else -1)
    return checkpoints[-1] / FILE if checkpoints else None


def load(location: str | os.PathLike) -> SavedEpisode | None:
    """The episode saved at `location` (see `episode_file`), or None where none was saved (a run of a version
    before episodes were saved, or a model that was never trained here). A file that exists but cannot be
    read is an `EpisodeFileError` naming it."""
    path = episode_file(location)
    if path is None:
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise EpisodeFileError(f"{path}: cannot read it as JSON ({exc})") from None
    if not isinstance(data, dict) or "episode" not in data:
        raise EpisodeFileError(f"{path}: not an episode file (no 'episode' object)")
    version = data.get("version")
    if not isinstance(version, int) or version > VERSION:
        raise EpisodeFileError(f"{path}: episode file version {version!r}; this skillrise-gym reads version "
                               f"{VERSION} and older: upgrade skillrise-gym")
    notes = {k: v for k, v in data.items() if k not in ("version", "episode")}
    return SavedEpisode(EpisodeSpec.from_dict(data["episode"], str(path)), path, notes)


def describe_value(value: Any) -> str:
    """A field's value as the console shows it."""
    return json.dumps(value, sort_keys=True) if isinstance(value, (dict, list)) else repr(value)
