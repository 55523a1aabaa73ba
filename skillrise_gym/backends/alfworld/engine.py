"""One TextWorld environment, reused for every game a backend plays, plus ALFWorld's hand-coded expert.

The wrapper chain is the one ALFWorld builds (`textworld.gym` + `AlfredDemangler` + `AlfredInfos` +
`Filter`), minus textworld's step `Limit` (SequenceEnv counts steps) and minus `AlfredExpert`, which needs a
`traj_data.json` beside each game and raises out of `step` when its expert gives up. `HandcodedExpert` drives
the same `HandCodedTWAgent` policies with `pddl_params` rebuilt from the folder name.

Why not `textworld.gym.register_games` per game: each registration builds a new `PddlEnv`, which copies and
dlopens fast-downward's 33 MB library and never releases it (memory grows 6-7 MB a game). Here one env loads
each game in turn; the `mementos` table is cleared when the game changes; a reset of the same game skips the
reload.
"""

from __future__ import annotations

import json
import random
import zlib
from pathlib import Path
from typing import Any

from skillrise_gym.backends.alfworld.data import TaskDirInfo
from skillrise_gym.backends.alfworld.fastreset import TranslationCache, clear_proposition_table, engine_caches

EXPERT_MAX_STEPS = 200  # what AlfredExpert gives HandCodedTWAgent


def task_params_for(gamefile: Path) -> dict[str, Any]:
    """`pddl_params` + `task_type` for the hand-coded expert: from traj_data.json when it is there (ALFWorld's
    own source), else rebuilt from the task folder's name."""
    traj = gamefile.parent / "traj_data.json"
    if traj.is_file():
        with open(traj, encoding="utf-8") as f:
            data = json.load(f)
        return {**data["pddl_params"], "task_type": data["task_type"]}
    info = TaskDirInfo.parse(gamefile.parent.parent.name)
    return {**info.pddl_params(), "task_type": info.task_type}


class HandcodedExpert:
    """ALFWorld's hand-coded expert, fed lazily.

    The policy keeps state and must see every step in order, but computing its suggestion each step costs
    time nobody may ask for; so steps are queued and replayed through the policy only when a suggestion is
    requested. The outcome is the same as feeding it eagerly. Its random choices come from a private RNG
    seeded by the task, so suggestions are reproducible, and it never suggests "help". Like `AlfredExpert`, the first suggestion is "look"
    and a non-admissible suggestion becomes "look"; when the policy gives up (timeout, no subgoal left, an
    internal error) the expert has no suggestion (None) for the rest of the game.
    """

    def __init__(self, task_params: dict[str, Any], seed: int, describe_fact) -> None:
        from alfworld.agents.expert import HandCodedTWAgent
        import alfworld.gen.constants as constants

        params = {k: (v.lower() if isinstance(v, str) and v in constants.OBJECTS else v) for k, v in task_params.items()}
        self.agent = HandCodedTWAgent(max_steps=EXPERT_MAX_STEPS)
        self.agent.task_params = params
        self.agent.policy = self.agent.get_task_policy(params)(params, max_steps=EXPERT_MAX_STEPS)
        self.rng = random.Random(seed)
        self.describe_fact = describe_fact
        self._pending: list[tuple[Any, str]] = []
        self._suggestion: str | None = None
        self._failed = False

    def observe(self, state: Any, command: str) -> None:
        """Queue one state (`command` is "" for the initial state)."""
        self._pending.append((state, command))

    def suggestion(self) -> str | None:
        if self._pending:
            self._catch_up()
        return None if self._failed else self._suggestion

    def _catch_up(self) -> None:
        import alfworld.agents.expert.handcoded_expert as module

        pending, self._pending = self._pending, []
        if self._failed:
            return
        saved_random = module.random
        module.random = self.rng  # the policy calls random.choice(...) on its module's `random`
        try:
            for state, command in pending:
                if not command:
                    self.agent.observe(state["feedback"])
                    self._suggestion = "look"
                    continue
                game_state = dict(state)
                game_state["facts"] = [self.describe_fact(f) for f in state["_facts"]]
                # Agents never see "help" (see ALFWorldBackend.admissible_actions): nor does the expert's
                # random fallback choose it.
                game_state["admissible_commands"] = [c for c in state["admissible_commands"] if c != "help"]
                action = self.agent.act(game_state, 0, state["won"], command)
                self._suggestion = action if action in game_state["admissible_commands"] else "look"
        except Exception:  # HandCodedAgentTimeout / HandCodedAgentFailed / a policy bug: the expert gave up
            self._failed = True
            self._suggestion = None
        finally:
            module.random = saved_random


class AlfredGame:
    """A TextWorld PDDL environment with ALFWorld's wrappers, loading one game at a time."""

    def __init__(self, cache: TranslationCache | None, memo_parses: bool = True) -> None:
        import textworld
        from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos
        from textworld.core import Wrapper
        from textworld.envs.wrappers import Filter, GenericEnvironment

        class _StateTap(Wrapper):
            """Keeps the engine's full GameState of the last reset/step (facts for the expert)."""

            last_state: Any = None

            def reset(self):
                self.last_state = super().reset()
                return self.last_state

            def step(self, command):
                self.last_state, score, done = super().step(command)
                return self.last_state, score, done

        self.cache = cache
        self.memo_parses = memo_parses
        self.request_infos = textworld.EnvInfos(won=True, admissible_commands=True, extras=["gamefile"])
        env = GenericEnvironment(self.request_infos)
        env = AlfredDemangler(shuffle=False)(env)
        env = AlfredInfos(env)
        self._tap = _StateTap(env)
        self.env = Filter(self._tap)
        self.gamefile: str | None = None

    @property
    def pddl_env(self):
        return self.env.unwrapped

    @property
    def walkthrough(self) -> list[str]:
        return list(self.pddl_env.walkthrough or [])

    @property
    def last_state(self) -> Any:
        return self._tap.last_state

    def reset(self, gamefile: str) -> tuple[str, dict[str, Any]]:
        """Load `gamefile` (unless it is the one already loaded) and reset it: (observation, infos)."""
        with engine_caches(self.cache, self.memo_parses):
            if gamefile != self.gamefile:
                self.gamefile = None
                clear_proposition_table()
                self.env.load(gamefile)
                self.gamefile = gamefile
            return self.env.reset()

    def step(self, command: str) -> tuple[str, float, bool, dict[str, Any]]:
        with engine_caches(None, self.memo_parses):
            return self.env.step(command)

    def describe_fact(self, fact: Any) -> Any:
        """A fact with demangled entity names, as `PddlEnv` reports them when facts are requested."""
        return self.pddl_env._get_human_readable_fact(fact)


def expert_seed(task_id: str) -> int:
    return zlib.crc32(task_id.encode("utf-8"))
