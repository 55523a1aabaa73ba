"""Published cross-task memory methods, played by any chat agent on the sequence envs (`skillrise-bench
--memory`).

    reflexion   Shinn et al. 2023: reflections on failed attempts, the latest 3
    expel       Zhao et al. 2024: an insight list edited by ADD / EDIT / AGREE / REMOVE operations from
                compared trajectories, each insight with an importance count
    awm         Wang et al. 2024: workflows induced from successful trajectories (Agent Workflow Memory)
    dc          Suzgun et al. 2025: a cheatsheet rewritten whole after each task (Dynamic Cheatsheet, cumulative)
    ace         Zhang et al. 2025: a playbook of itemised bullets with helpful/harmful counters, edited by a
                reflector's tags and a curator's delta operations (Agentic Context Engineering)

Each runs over the env's ``skill`` carry: the env carries the document, and the method writes it
(`MemoryAgent`). The memory modes besides the methods stay the env's own: ``skill`` (the policy curates with
the env's CURATE prompt), ``none`` (nothing carried) and ``reflect`` (a reflection after every task, all kept).
"""

from __future__ import annotations

from skillrise_gym.memory.ace import ACE
from skillrise_gym.memory.agent import MemoryAgent
from skillrise_gym.memory.awm import AWM
from skillrise_gym.memory.base import MemoryMethod, Request
from skillrise_gym.memory.dc import DynamicCheatsheet
from skillrise_gym.memory.expel import ExpeL
from skillrise_gym.memory.reflexion import Reflexion

METHODS: dict[str, type[MemoryMethod]] = {cls.name: cls for cls in (Reflexion, ExpeL, AWM, DynamicCheatsheet, ACE)}

__all__ = ["METHODS", "MemoryAgent", "MemoryMethod", "Request", "env_carry", "is_method", "method"]


def is_method(mode: str) -> bool:
    return mode in METHODS


def method(name: str) -> MemoryMethod:
    """A memory method by name; an unknown name is a ValueError listing the known ones."""
    try:
        return METHODS[name]()
    except KeyError:
        raise ValueError(f"unknown memory method {name!r}; known: {', '.join(METHODS)}") from None


def env_carry(mode: str) -> str:
    """What the env carries for a memory mode: the document (``skill``) for a method, else the mode itself."""
    return "skill" if mode in METHODS else mode
