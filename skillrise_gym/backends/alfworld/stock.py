"""ALFWorld's stock engine path, untouched: the reference for parity tests and the baseline for benchmarks.

This is how ALFWorld itself plays a game (`AlfredTWEnv.init_env`): register the game files with
`textworld.gym.register_games` and the `AlfredDemangler` + `AlfredInfos` wrappers, `textworld.gym.make`,
then the old batched API (`env.reset()`, `env.step([command])`). No cache is involved.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class Frame:
    """What one reset or step showed: compared field by field between engine paths."""

    observation: str
    admissible: tuple[str, ...]
    score: float
    done: bool
    won: bool


def make_stock_env(gamefile: str, max_episode_steps: int = 1000):
    """A `textworld.gym` env for one game, built exactly as ALFWorld builds its envs."""
    import textworld
    import textworld.gym
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos

    infos = textworld.EnvInfos(won=True, admissible_commands=True, extras=["gamefile"])
    env_id = textworld.gym.register_games(
        [gamefile], infos, batch_size=1, asynchronous=False, max_episode_steps=max_episode_steps,
        wrappers=[AlfredDemangler(shuffle=False), AlfredInfos],
    )
    return textworld.gym.make(env_id)


def stock_play(gamefile: str, actions: Sequence[str], env=None) -> list[Frame]:
    """Reset `gamefile` on the stock path and play `actions`: one Frame for the reset and one per action."""
    own = env is None
    env = make_stock_env(gamefile) if own else env
    try:
        obs, infos = env.reset()
        frames = [Frame(obs[0], tuple(infos["admissible_commands"][0]), 0.0, False, bool(infos["won"][0]))]
        for action in actions:
            obs, scores, dones, infos = env.step([action])
            frames.append(Frame(obs[0], tuple(infos["admissible_commands"][0]), float(scores[0]),
                                bool(dones[0]), bool(infos["won"][0])))
        return frames
    finally:
        if own:
            env.close()
