"""`ALFWorldBackend`: ALFWorld's text games on the real alfworld/TextWorld engine.

- Tasks: one per game file (`json_2.1.1/<split>/<task folder>/<trial>/game.tw-pddl`); `Task.id` is the path
  relative to the split folder ("pick_heat_then_place_in_recep-Potato-None-SinkBasin-12/trial_T2019...").
- Family: the task type (as the SkillRise paper and reference do), or with family="task_type_object"
  "<task type>/<Object>" (e.g. "pick_heat_then_place_in_recep/Potato").
- Difficulty: the length of the game's walkthrough (the planner-found winning plan stored in the game
  file); by type on average look 3.6 < place 4.1 < clean/cool/heat ~6.2 < pick_two 8.3.
- Success: the engine's `won`; score 1.0 when won, else 0.0. Inadmissible or garbage commands get the
  engine's own "Nothing happens." and count as steps.
- Experts: "walkthrough" replays the game's walkthrough while the agent has followed it (inadmissible
  commands change nothing in the game, so they do not count as deviating); once the agent deviates, the
  suggestion comes from ALFWorld's hand-coded expert, which has tracked the game all along. "handcoded"
  always asks the hand-coded expert. None when the game is over or the hand-coded expert gave up.

The engine is imported only when the backend is made; importing this module is cheap.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, ClassVar

from skillrise_gym.backends import require
from skillrise_gym.backends.alfworld.data import (
    GAME_FILE,
    SPLIT_FOLDERS,
    load_index,
    resolve_data_root,
    split_folder,
)
from skillrise_gym.backends.base import Backend, DataNotFoundError, EngineError, StepResult
from skillrise_gym.paths import cache_dir
from skillrise_gym.tasks import Task

FAMILIES = ("task_type", "task_type_object")
EXPERTS = ("walkthrough", "handcoded")
_TASK_LINE = re.compile(r"Your task is to:\s*(.+)")


def task_description_from(observation: str) -> str:
    """The goal sentence of an initial observation ("... Your task is to: put a hot potato in sinkbasin.")."""
    matches = _TASK_LINE.findall(observation)
    return matches[-1].strip() if matches else ""


class ALFWorldBackend(Backend):
    """ALFWorld on TextWorld. Options (all keyword):

    data_dir: a folder holding json_2.1.1/ (or that folder itself), a folder holding json_2.1.1.tar.xz, or the
        archive path (extracted once into the cache). Default: $ALFWORLD_DATA, else ~/.cache/alfworld.
    family: "task_type" (default) or "task_type_object".
    expert: "walkthrough" (default) or "handcoded" (see the module docstring).
    cache: keep the task index and the reset cache on disk under the project cache (default True; False
        runs the stock engine path, for comparisons).
    """

    benchmark: ClassVar[str] = "alfworld"
    splits: ClassVar[tuple[str, ...]] = tuple(SPLIT_FOLDERS)
    #: ALFWorld's own names of its evaluation splits (its json_2.1.1/ folders)
    split_aliases: ClassVar[dict[str, str]] = {"valid_seen": "eval_in_distribution",
                                               "valid_unseen": "eval_out_of_distribution"}
    #: SkillRise's reference gives 10 turns per task for RL, ALFWorld's own configs 50 steps; walkthroughs
    #: are 3-12 steps, the hand-coded expert needs ~26 on average: 30 leaves an agent room to explore.
    default_max_task_steps: ClassVar[int] = 30
    admissible_by_default: ClassVar[bool] = True

    def __init__(
        self,
        data_dir: str | os.PathLike | None = None,
        family: str = "task_type",
        expert: str = "walkthrough",
        cache: bool = True,
    ) -> None:
        require("alfworld", "alfworld", "The ALFWorld backend")
        if family not in FAMILIES:
            raise ValueError(f"unknown family {family!r}; choose one of {', '.join(FAMILIES)}")
        if expert not in EXPERTS:
            raise ValueError(f"unknown expert {expert!r}; choose one of {', '.join(EXPERTS)}")
        self.family = family
        self.expert = expert
        self.cache = bool(cache)
        self.data_root = resolve_data_root(data_dir)
        #: split -> [{"id", "reason"}] of games skipped as corrupt or unsolvable
        self.skipped: dict[str, list[dict[str, str]]] = {}
        self._tasks: dict[str, list[Task]] = {}
        self._game = None  # AlfredGame, made on first reset
        self._translation_cache = None
        self._task: Task | None = None
        self._description = ""
        self._failure: str | None = None  # why the engine failed, until the next successful reset
        self._infos: dict[str, Any] = {}
        self._done = False
        self._won = False
        self._steps = 0
        self._effective: list[str] = []  # admissible commands played so far (they may change the game)
        self._walkthrough: list[str] = []
        self._handcoded = None
        self._last: StepResult | None = None
        self._closed = False

    # ----------------------------------------------------------------- tasks
    def list_tasks(self, split: str) -> list[Task]:
        split = self.canonical_split(split)  # ALFWorld's own valid_seen / valid_unseen name ours
        if split not in self._tasks:
            folder = split_folder(self.data_root, split)
            index = load_index(folder, use_cache=self.cache)
            self.skipped[split] = list(index["skipped"])
            self._tasks[split] = [self._make_task(folder, split, entry) for entry in index["games"]]
        return list(self._tasks[split])

    def _make_task(self, folder: Path, split: str, entry: dict[str, Any]) -> Task:
        family = entry["task_type"]
        if self.family == "task_type_object":
            family = f"{entry['task_type']}/{entry['object']}"
        payload = {
            "gamefile": str(folder / entry["id"] / GAME_FILE),
            **{k: entry[k] for k in ("task_type", "object", "mrecep", "receptacle", "scene", "walkthrough_len")},
        }
        return Task("alfworld", entry["id"], family, float(entry["walkthrough_len"]), split, payload)

    def _gamefile(self, task: Task) -> Path:
        """The task's game file: the payload's path, else the id under this backend's data (a task made by
        another process may point into another cache)."""
        given = task.payload.get("gamefile")
        if given and Path(given).is_file():
            return Path(given)
        self.check_split(task.split)
        path = self.data_root / SPLIT_FOLDERS[task.split] / task.id / GAME_FILE
        if not path.is_file():
            raise DataNotFoundError(f"ALFWorld game file for task {task.id!r} not found (looked at {given} and {path})")
        return path

    # ----------------------------------------------------------------- episode
    def _engine(self):
        if self._game is None:
            from skillrise_gym.backends.alfworld.engine import AlfredGame
            from skillrise_gym.backends.alfworld.fastreset import TranslationCache

            if self.cache and self._translation_cache is None:
                self._translation_cache = TranslationCache(cache_dir("alfworld", "reset-cache"))
            self._game = AlfredGame(self._translation_cache, memo_parses=self.cache)
        return self._game

    def reset(self, task: Task) -> StepResult:
        if self._closed:
            raise RuntimeError("ALFWorldBackend is closed")
        if task.benchmark != self.benchmark:
            raise ValueError(f"not an ALFWorld task: {task.benchmark}/{task.id}")
        gamefile = self._gamefile(task)
        self._task, self._last = None, None
        try:
            game = self._engine()
            observation, infos = game.reset(str(gamefile))
            walkthrough = game.walkthrough
            handcoded = self._make_handcoded(game, gamefile, task)
        except Exception as exc:
            self._game = None  # rebuild the engine on the next reset
            self._failure = f"ALFWorld engine failed to load {task.id}: {exc.__class__.__name__}: {exc}"
            raise EngineError(self._failure) from exc
        self._failure = None
        self._task, self._infos = task, infos
        self._description = task_description_from(observation)
        self._steps, self._effective, self._walkthrough = 0, [], walkthrough
        self._won = bool(infos["won"])
        self._done = self._won
        self._handcoded = handcoded
        self._last = StepResult(observation=observation, score=float(self._won), done=self._done, success=self._won,
                                info={"steps": 0, "gamefile": str(gamefile)})
        return self._last

    def _make_handcoded(self, game, gamefile: Path, task: Task):
        from skillrise_gym.backends.alfworld.engine import HandcodedExpert, expert_seed, task_params_for

        try:
            params = task_params_for(gamefile)
        except (ValueError, KeyError, OSError):
            return None  # no folder name or traj_data.json to rebuild the expert from
        expert = HandcodedExpert(params, expert_seed(task.id), game.describe_fact)
        expert.observe(game.last_state, "")
        return expert

    def _require_task(self) -> Task:
        if self._task is None:
            if self._failure:
                raise EngineError(f"{self._failure}; reset() a task to go on")
            raise RuntimeError("call reset(task) first")
        return self._task

    def step(self, action: str) -> StepResult:
        self._require_task()
        if not isinstance(action, str):
            raise TypeError(f"an ALFWorld command is a str, got {type(action).__name__}")
        if self._done:
            return self._last  # the game is over: like textworld's batch env, repeat its last state
        command = action.strip()
        admissible = command in self._infos["admissible_commands"]
        try:
            observation, score, done, infos = self._engine().step(command)
        except Exception as exc:
            self._game, self._task = None, None  # the task is lost; the engine is rebuilt on the next reset
            self._failure = f"ALFWorld engine failed on {command!r}: {exc.__class__.__name__}: {exc}"
            raise EngineError(self._failure) from exc
        self._steps += 1
        if admissible:
            self._effective.append(command)
        if self._handcoded is not None:
            self._handcoded.observe(self._game.last_state, command)
        self._infos = infos
        self._won = bool(infos["won"])
        self._done = bool(done) or self._won
        self._last = StepResult(observation=observation, score=float(score), done=self._done, success=self._won,
                                info={"steps": self._steps, "admissible": admissible})
        return self._last

    def task_description(self) -> str:
        self._require_task()
        return self._description

    def admissible_actions(self) -> list[str]:
        self._require_task()
        return [c for c in self._infos["admissible_commands"] if c != "help"]

    def walkthrough(self) -> list[str]:
        """The current game's walkthrough: the planner-found winning commands stored in its game file."""
        self._require_task()
        return list(self._walkthrough)

    def expert_action(self) -> str | None:
        self._require_task()
        if self._done:
            return None
        if self.expert == "walkthrough":
            n = len(self._effective)
            if n < len(self._walkthrough) and self._effective == self._walkthrough[:n]:
                return self._walkthrough[n]
        return self._handcoded.suggestion() if self._handcoded is not None else None

    @classmethod
    def data_identity(cls, options: dict[str, Any]) -> dict[str, str]:
        """The resolved json_2.1.1 folder, and a digest of every game file's path and size under it."""
        import hashlib

        root = resolve_data_root(options.get("data_dir"))
        digest = hashlib.sha256()
        for game in sorted(root.glob(f"*/*/*/{GAME_FILE}")):
            digest.update(f"{game.relative_to(root)}\0{game.stat().st_size}\n".encode())
        return {"source": str(root), "fingerprint": f"alfworld:{digest.hexdigest()[:16]}"}

    def __getstate__(self) -> dict:
        return self.state_unless_live(self._game is not None, "its TextWorld game is a live engine (a compiled game state behind ctypes pointers)")

    def close(self) -> None:
        self._game = None
        self._task = None
        self._closed = True
