"""The turns, credit and records of a fixed-seed rollout, for every algorithm, against a file recorded before
the rollout and credit code was restructured (issue 27): a refactoring must leave every field identical.

The model is a deterministic stand-in (`scripted_generate`: the answer a turn gets depends only on its prompt
and its seed), so the recording holds on any machine; the envs are the real rulebook engine, whose tasks and
feedback are deterministic. Regenerate only for an intended change of behaviour:

    python tests/test_rollout_golden.py --write
"""

from __future__ import annotations

import json
import re
import sys
import zlib
from pathlib import Path
from typing import Any

import pytest

GOLDEN = Path(__file__).resolve().parent / "data" / "rollout_golden.json"

#: (name, TrainConfig fields) of every algorithm and curate credit the trainer offers
SETTINGS = [
    ("skillrise-future", {"algo": "skillrise", "curate_credit": "future"}),
    ("skillrise-own", {"algo": "skillrise", "curate_credit": "own"}),
    ("skillrise-none", {"algo": "skillrise", "curate_credit": "none"}),
    ("grpo", {"algo": "grpo", "curate_credit": "future"}),
    ("gigpo", {"algo": "gigpo", "curate_credit": "future"}),
    ("lamer", {"algo": "lamer", "curate_credit": "future"}),
    ("skillrise-std", {"algo": "skillrise", "curate_credit": "future", "advantage_mode": "mean_std_norm"}),
]
COMMON = {"env": "rulebook", "K": 3, "G": 2, "S": 2, "max_task_steps": 2, "seed": 5, "prompt_style": "compact",
          "backend_options": {"rules": 2, "bins": 4}}
#: rollout statistics logged since the recording was made (additions, not changes of behaviour)
ADDED_STATS = {"repeats/curate"}
ACTIONS = re.compile(r"^Actions: (.+)$", re.MULTILINE)
RULE = re.compile(r"\w+ items go in the \w+ bin")


def scripted_generate(prompts: list[str], prefixes: list[str], seeds: list[int]) -> list[Any]:
    """A deterministic stand-in for the policy: a solve turn names one of the listed actions (chosen by its
    seed), now and then without its closing tag or as nonsense; a curate turn keeps the old skills or writes
    the rule the attempt revealed, or (now and then) forgets the tags."""
    from skillrise_train.samples import Completion

    out = []
    for prompt, prefix, seed in zip(prompts, prefixes, seeds):
        pick = seed % 7
        listed = ACTIONS.findall(prompt)
        if "Rewrite the skills" in prompt or "<skill>" in prefix or "reflect" in prompt.lower()[:200]:
            rules = RULE.findall(prompt.split("Did:", 1)[-1])
            body = "; ".join(rules) if pick % 2 else "keep sorting carefully"
            text = (prefix or "<skill>") + body + ("" if pick == 6 else "</skill>")
        elif listed:
            actions = [a.strip() for a in listed[-1].split("|")]
            body = actions[pick % len(actions)] if pick != 5 else "look around"
            text = (prefix or "<action>") + body + ("" if pick == 4 else "</action>")
        else:
            text = (prefix or "") + "nothing</remark>"
        prompt_ids = list(zlib.crc32(prompt.encode()).to_bytes(4, "little")) + [len(prompt) % 97]
        out.append(Completion(prompt_ids=prompt_ids, completion_ids=[len(w) for w in text.split()], text=text))
    return out


def _round(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 9)
    if isinstance(value, dict):
        return {str(k): _round(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_round(v) for v in value]
    return value


def play(fields: dict[str, Any]) -> dict[str, Any]:
    """One fixed-seed rollout of `fields` through the trainer's rollout and credit code: everything it
    records, as plain JSON."""
    from skillrise_train.algorithms import algorithm_for
    from skillrise_train.config import TrainConfig
    from skillrise_train.rollout import RolloutEngine
    from skillrise_train.rollout_setup import training_episode
    from skillrise_train.samples import rollout_stats

    config = TrainConfig(**{**COMMON, **fields}, output_dir="unused")
    engine = RolloutEngine.from_train_config(config, training_episode(config, config.prompt_style, split="train"))
    try:
        plans = engine.plan(engine.sequences(1, config.S), tag="step1")
        result = engine.play(engine.mine(plans), scripted_generate, step=1)
    finally:
        engine.close()
    algorithm = algorithm_for(config)
    returns, advantages = algorithm.credit(result, config)
    stats = rollout_stats(result, advantages, config.K)
    return _round({
        "turns": [s.turn.to_dict() for s in result.samples],
        "tokens": [[len(s.prompt_ids), len(s.completion_ids)] for s in result.samples],
        "returns": [float(r) for r in returns],
        "advantages": [float(a) for a in advantages],
        "trained": algorithm.trained_turns([s.turn for s in result.samples], config),
        "task_rewards": result.task_rewards,
        "success": result.success,
        "plans": [[p.trial_id, p.group_id, p.task_ids, p.position_offset, p.sequence_index] for p in result.plans],
        "stats": {k: v for k, v in stats.items() if not k.startswith("time/")},
    })


@pytest.mark.parametrize("name, fields", SETTINGS, ids=[name for name, _ in SETTINGS])
def test_a_fixed_seed_rollout_records_and_credits_exactly_what_it_did_before(name, fields):
    recorded = json.loads(GOLDEN.read_text())[name]
    now = json.loads(json.dumps(play(fields)))
    assert now.keys() == recorded.keys()
    # statistics added since the recording: new numbers, no recorded one changed
    added = set(now["stats"]) - set(recorded["stats"])
    assert added <= ADDED_STATS, f"{name}: unexpected new stats {sorted(added - ADDED_STATS)}"
    now["stats"] = {k: v for k, v in now["stats"].items() if k not in ADDED_STATS}
    for key in recorded:  # one key at a time: a failure names what changed
        assert now[key] == recorded[key], f"{name}: {key} changed"


def test_the_recording_exercises_what_it_guards():
    """Not a vacuous recording: every setting has solve turns, a solved task and an invalid answer; the
    sequence algorithms have curate turns with non-zero advantages; GiGPO's stats see its anchor groups."""
    golden = json.loads(GOLDEN.read_text())
    assert set(golden) == {name for name, _ in SETTINGS}
    for name, run in golden.items():
        roles = {t["role"] for t in run["turns"]}
        assert "solve" in roles and any(t["success"] for t in run["turns"]), name
        assert not all(t["format_valid"] for t in run["turns"]), name
        assert any(a != 0.0 for a in run["advantages"]), name
        if name.startswith(("skillrise", "lamer")):
            assert "curate" in roles, name
    assert len(golden["skillrise-none"]["trained"]) < len(golden["skillrise-none"]["turns"])
    assert golden["gigpo"]["advantages"] != golden["grpo"]["advantages"]


if __name__ == "__main__":
    if "--write" not in sys.argv:
        sys.exit("usage: python tests/test_rollout_golden.py --write   (records the current behaviour)")
    GOLDEN.parent.mkdir(parents=True, exist_ok=True)
    GOLDEN.write_text(json.dumps({name: play(fields) for name, fields in SETTINGS}, indent=1, sort_keys=True) + "\n")
    print(f"wrote {GOLDEN}")
