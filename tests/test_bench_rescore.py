"""`skillrise-bench rescore RUN`: results and summary rebuilt from turns.jsonl alone agree with the runner's
own, for one and for several carry modes; a turn that disagrees with its result line is reported."""

from __future__ import annotations

import json
from pathlib import Path

from test_bench_carry import bench

from skillrise_gym.bench.cli import main
from skillrise_gym.bench.rescore import rescore
from skillrise_gym.records import iter_jsonl, json_line

STATS = ("success", "score", "success_by_position", "score_by_position", "steps_per_task", "agent_calls",
         "invalid_format_rate", "prompt_tokens", "completion_tokens")


def same_blocks(rescored: dict, summary: dict) -> None:
    for mine, theirs in zip(rescored["blocks"], summary["blocks"], strict=True):
        assert mine["sequences"] == theirs["sequences"]
        for key in STATS:
            assert mine.get(key) == theirs.get(key), key


def test_rescore_agrees_with_the_runner_for_every_carry_mode(tmp_path: Path, capsys):
    out = tmp_path / "run"
    assert bench(out, agent="random", K=(1, 3), n=3, carry=["skill", "none"]) == 0
    by_mode = rescore(out)
    assert set(by_mode) == {"skill", "none"}
    for mode, rescored in by_mode.items():
        summary = json.loads((out / f"carry-{mode}" / "summary.json").read_text())
        assert rescored["differences"] == [] and rescored["sequences"] == 6
        same_blocks(rescored, summary)
    capsys.readouterr()
    assert main(["rescore", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "carry skill" in printed and "no differences" in printed
    assert json.loads((out / "rescored.json").read_text())["skill"]["sequences"] == 6


def test_a_turn_that_disagrees_with_its_result_is_reported(tmp_path: Path, capsys):
    out = tmp_path / "run"
    assert bench(out, agent="expert", K=(2,), n=2, carry=None) == 0
    turns_path = out / "turns.jsonl"
    turns = list(iter_jsonl(turns_path))
    last_solve = max(i for i, t in enumerate(turns) if t["role"] == "solve" and t["extra"]["index"] == 0)
    turns[last_solve]["success"] = not turns[last_solve]["success"]
    turns_path.write_text("".join(json_line(t) for t in turns))
    (rescored,) = rescore(out).values()
    assert [(d["index"], d["field"]) for d in rescored["differences"]] == [(0, "success")]
    assert main(["rescore", str(out)]) == 1
    assert "1 difference" in capsys.readouterr().out


def test_rescore_of_a_folder_that_is_not_a_run_is_a_clear_error(tmp_path: Path, capsys):
    assert main(["rescore", str(tmp_path)]) == 2
    assert "not a skillrise-bench run directory" in capsys.readouterr().err
