"""The experts reach their known success through skillrise-bench on each real backend, and the random agent
runs end to end on the same pinned sequences.

Known expert success (measured by the backend tests): ALFWorld's walkthrough expert wins every game;
WebShop's expert buys the target on at least 95% of test goals (the misses come from upstream's option
quirks); ScienceWorld's gold path solves a task when the step limit allows its length.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest
from conftest import SHARED_DATA, need_data

from skillrise_gym.bench.cli import main


def bench(env: str, agent: str, out: Path, *extra: str, K=(1, 2), n: int = 3) -> dict:
    code = main(["--env", env, "--agent", agent, "--K", *map(str, K), "--num-sequences", str(n), "--out", str(out),
                 "--env-workers", "1", "--no-progress", "--no-plots", *extra])
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "complete" and summary["finished"] == len(K) * n
    return summary


def rates(summary: dict) -> list[float]:
    return [b["success"]["mean"] for b in summary["blocks"]]


def alfworld_data() -> Path:
    given = os.environ.get("ALFWORLD_DATA")
    if given and Path(given).exists():
        return Path(given)
    return SHARED_DATA / "alfworld"


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("alfworld") is None, reason="alfworld is not installed")
def test_alfworld_expert_wins_every_game_through_the_bench(tmp_path):
    data = need_data(alfworld_data(), "ALFWorld game files ($ALFWORLD_DATA)")
    options = ["--split", "eval_in_distribution", "--backend-option", f"data_dir={data}"]
    summary = bench("alfworld", "expert", tmp_path / "expert", *options, K=(1, 2), n=3)
    assert rates(summary) == [1.0, 1.0]
    assert all(b["invalid_format_rate"] == 0.0 and b["engine_errors"] == 0 for b in summary["blocks"])
    random = bench("alfworld", "random", tmp_path / "random", *options, "--max-task-steps", "5", K=(1,), n=2)
    assert random["blocks"][0]["steps_per_task"]["mean"] > 0


@pytest.mark.skipif(importlib.util.find_spec("bm25s") is None, reason="the webshop extra is not installed")
def test_webshop_expert_reaches_its_success_through_the_bench(tmp_path):
    options = ["--backend-option", "noun_matcher=fallback"]
    summary = bench("webshop", "expert", tmp_path / "expert", *options, K=(1, 3), n=6)
    assert min(rates(summary)) >= 0.9
    assert all(b["score"]["mean"] > 0.9 and b["invalid_format_rate"] == 0.0 for b in summary["blocks"])
    random = bench("webshop", "random", tmp_path / "random", *options, K=(1,), n=3)
    expert_ids = [json.loads(line)["task_ids"] for line in (tmp_path / "expert" / "results.jsonl").read_text().splitlines()]
    random_ids = [json.loads(line)["task_ids"] for line in (tmp_path / "random" / "results.jsonl").read_text().splitlines()]
    assert random_ids == expert_ids[:3]  # the same pinned sequences for every agent
    assert random["blocks"][0]["success"]["mean"] <= rates(summary)[0]


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("scienceworld") is None, reason="scienceworld is not installed")
def test_scienceworld_gold_expert_solves_tasks_through_the_bench(tmp_path):
    summary = bench("scienceworld", "expert", tmp_path / "expert", "--split", "test", "--family", "find-living-thing",
                    "--max-task-steps", "100", K=(2,), n=2)
    assert rates(summary) == [1.0]
    assert summary["blocks"][0]["score"]["mean"] == 100.0
