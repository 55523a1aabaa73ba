"""--overlong-penalty: a completion cut off at --max-new-tokens loses the penalty from its advantage, after
credit and nothing else changed; the share cut is logged per role; bad values are refused."""
import json

import pytest

from skillrise_train.cli import run
from skillrise_train.config import TrainConfig


def _one_step(tmp_path, name, tiny_model_dir, penalty):
    out = tmp_path / name
    run(TrainConfig(env="rulebook", model=tiny_model_dir, K=2, G=2, S=1, steps=1, max_task_steps=1,
                    max_new_tokens=6, warmstart_steps=0, overlong_penalty=penalty, output_dir=str(out), seed=3,
                    threads=1, record_turns=True, save_interval=1))
    turns = [json.loads(line) for line in (out / "turns.jsonl").read_text().splitlines()]
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return turns, next(m for m in metrics if "cut/curate" in m)


def test_cut_completions_lose_the_penalty_and_nothing_else_changes(tmp_path, tiny_model_dir):
    plain, plain_stats = _one_step(tmp_path, "plain", tiny_model_dir, 0.0)
    penalised, stats = _one_step(tmp_path, "penalised", tiny_model_dir, 1.5)
    assert [t["response"] for t in plain] == [t["response"] for t in penalised]  # the same rollout
    cut = [t["extra"]["completion_cut"] for t in plain]
    # a random tiny model rarely ends within 6 tokens: most turns are cut, and cut ones used the whole budget
    assert any(cut) and all(t["completion_tokens"] == 6 for t, c in zip(plain, cut) if c)
    for before, after, was_cut in zip(plain, penalised, cut):
        assert before["extra"]["return"] == after["extra"]["return"]
        assert after["extra"]["advantage"] == pytest.approx(before["extra"]["advantage"] - 1.5 * was_cut)
    for role in ("solve", "curate"):
        share = [c for t, c in zip(plain, cut) if t["role"] == role]
        assert stats[f"cut/{role}"] == plain_stats[f"cut/{role}"] == pytest.approx(sum(share) / len(share))


@pytest.mark.parametrize("value", [-0.1, float("nan"), float("inf")])
def test_a_negative_or_non_finite_overlong_penalty_is_refused(value):
    with pytest.raises(ValueError, match="overlong_penalty"):
        TrainConfig(overlong_penalty=value)


@pytest.mark.parametrize("value", [-0.1, float("nan"), float("inf")])
def test_a_negative_or_non_finite_invalid_penalty_is_refused(value):
    """As the overlong penalty: a NaN used to pass `invalid_penalty < 0` and reach every advantage."""
    with pytest.raises(ValueError, match="invalid_penalty must be a finite number >= 0"):
        TrainConfig(invalid_penalty=value)
