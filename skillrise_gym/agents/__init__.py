"""Bench agents: observations in, text out (see `base.Agent`).

    expert  - the backend's expert (scripted upper line)
    random  - a seeded random admissible action
    openai  - any OpenAI-compatible chat endpoint
    hf      - a local transformers model, batched

Modules with heavy imports (torch) load only when their agent is made.
"""

from skillrise_gym.agents.base import Agent, AgentError, AgentOutput

AGENTS = ("expert", "random", "openai", "hf")


def __getattr__(name: str):
    if name == "ExpertAgent":
        from skillrise_gym.agents.expert import ExpertAgent

        return ExpertAgent
    if name == "RandomAgent":
        from skillrise_gym.agents.random_agent import RandomAgent

        return RandomAgent
    if name in ("OpenAIAgent", "OpenAIConfig"):
        from skillrise_gym.agents import openai_agent

        return getattr(openai_agent, name)
    if name in ("HFAgent", "HFConfig"):
        from skillrise_gym.agents import hf_agent

        return getattr(hf_agent, name)
    raise AttributeError(f"module 'skillrise_gym.agents' has no attribute {name!r}")


__all__ = ["AGENTS", "Agent", "AgentError", "AgentOutput", "ExpertAgent", "HFAgent", "HFConfig", "OpenAIAgent",
           "OpenAIConfig", "RandomAgent"]
