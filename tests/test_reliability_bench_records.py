"""Reliability of the bench's draws, pools and records (issue 46, part of item 13): a huge --num-sequences starts
playing at once and draws only a chunk ahead; envs that hold memory of their own (ScienceWorld's JVMs) are bounded
by the memory available, as the trainer's; `rescore` reports a contradictory duplicate result line, and resuming
refuses what `rescore` refuses (one rule for both: a damaged record line is named by file:line, exit 2)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import pytest

from test_bench_carry import bench
from test_reliability_bench import DAMAGE, finished_run  # noqa: F401  (finished_run: a fixture)

from skillrise_gym.agents.base import AgentOutput
from skillrise_gym.agents.expert import ExpertAgent
from skillrise_gym.bench import runner as runner_module
from skillrise_gym.bench.cli import EXIT_USAGE, main
from skillrise_gym.bench.runner import BenchConfig, run_bench
from skillrise_gym.records import json_line
from skillrise_gym.sequences import SequenceSampler

#: the most draws the runner may make before its first agent call (a chunk of play; the fix's bound is 1024)
DRAWS_AHEAD = 5000


class StoppingExpert(ExpertAgent):
    """The expert, interrupted (as by Ctrl-C) after `stop_after` calls; `drawn_at_first_call`: how many sequences
    had been drawn when it was first asked."""

    def __init__(self, drawn: list[int], stop_after: int, batch_size: int = 1) -> None:
        super().__init__(batch_size)
        self.drawn, self.stop_after, self.calls = drawn, stop_after, 0
        self.drawn_at_first_call: int | None = None

    def act(self, observations: Sequence[dict[str, Any]], infos: Sequence[dict[str, Any]] | None = None
            ) -> list[AgentOutput]:
        if self.drawn_at_first_call is None:
            self.drawn_at_first_call = len(self.drawn)
        self.calls += 1
        if self.calls > self.stop_after:
            raise KeyboardInterrupt
        return super().act(observations, infos)


@pytest.mark.parametrize("carry", [["skill"], ["skill", "none"]])
def test_a_huge_num_sequences_starts_playing_at_once_and_draws_a_chunk_at_a_time(tmp_path, monkeypatch, carry):
    drawn: list[int] = []
    real = SequenceSampler.sequence

    def counting(self, seed, index):
        drawn.append(index)
        if len(drawn) > 10 * DRAWS_AHEAD:  # drawing everything first: stop it before it fills the memory
            raise AssertionError(f"{len(drawn)} sequences drawn and no more than a few played")
        return real(self, seed, index)

    monkeypatch.setattr(SequenceSampler, "sequence", counting)
    agent = StoppingExpert(drawn, stop_after=40, batch_size=4)
    config = BenchConfig(env="toy", out=str(tmp_path / "run"), K=[1, 2], num_sequences=100_000_000, workers=0,
                         progress=False, plots=False, carry=carry)
    outcome = run_bench(config, agent)
    assert outcome.status == "interrupted"
    assert agent.drawn_at_first_call is not None and agent.drawn_at_first_call <= DRAWS_AHEAD
    assert len(drawn) <= 2 * DRAWS_AHEAD and outcome.summary["finished"] > 0
    assert outcome.summary["requested"] == 2 * 100_000_000 * len(carry)
    results = (tmp_path / "run" / ("results.jsonl" if carry == ["skill"] else "carry-skill/results.jsonl"))
    finished = [json.loads(line) for line in results.read_text().splitlines()]
    assert finished and all(r["K"] == 1 and r["index"] < DRAWS_AHEAD for r in finished)  # the first chunk's


def test_draws_are_the_samplers_whatever_the_chunk(tmp_path, monkeypatch):
    """Playing in chunks changes nothing recorded: a run of 7 sequences in chunks of 4 (one env: at least 4 a
    chunk) is the run in one go."""
    def play(out: Path) -> list[dict]:
        config = BenchConfig(env="toy", out=str(out), K=[2], num_sequences=7, workers=0, progress=False, plots=False)
        assert run_bench(config, ExpertAgent(batch_size=1)).status == "complete"
        return [{k: v for k, v in json.loads(line).items() if k not in ("agent_s", "wall_s", "finished_at")}
                for line in (out / "results.jsonl").read_text().splitlines()]

    whole = play(tmp_path / "whole")
    monkeypatch.setattr(runner_module, "PLAY_CHUNK", 2, raising=False)
    chunked = play(tmp_path / "chunked")
    assert sorted(whole, key=lambda r: r["index"]) == sorted(chunked, key=lambda r: r["index"])


# ----------------------------------------------------------------- envs holding memory: bounded as in the trainer
def _available() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    pytest.skip("this system does not say how much memory is available")


@pytest.fixture
def pool_sizes(monkeypatch) -> list[int]:
    sizes: list[int] = []
    real = runner_module.make_pool

    def recording(env_fns, config=None):
        sizes.append(len(env_fns))
        return real(env_fns, config)

    monkeypatch.setattr(runner_module, "make_pool", recording)
    return sizes


def test_envs_that_hold_memory_are_bounded_by_the_memory_available(tmp_path, monkeypatch, pool_sizes):
    from skillrise_gym.backends.toy import ToyBackend

    # each toy env "holds" as much as is available now: the memory holds one (until the available memory doubles)
    monkeypatch.setattr(ToyBackend, "env_memory", _available())
    logged: list[str] = []
    config = BenchConfig(env="toy", out=str(tmp_path / "run"), K=[1], num_sequences=8, workers=0, progress=False,
                         plots=False)
    assert run_bench(config, ExpertAgent(batch_size=8), log=logged.append).status == "complete"
    assert pool_sizes == [1]  # not the agent's batch of 8 (an openai agent's --concurrency: 8 JVMs)
    assert any("--envs" in line and "memory" in line for line in logged), logged
    # --envs asks for a number: played as asked, with a warning
    logged.clear()
    config = BenchConfig(env="toy", out=str(tmp_path / "asked"), K=[1], num_sequences=8, workers=0, parallel=3,
                         progress=False, plots=False)
    assert run_bench(config, ExpertAgent(batch_size=8), log=logged.append).status == "complete"
    assert pool_sizes[-1] == 3 and any("warning" in line and "memory" in line for line in logged), logged
    # envs that hold no memory of their own: the agent's batch, as before
    monkeypatch.setattr(ToyBackend, "env_memory", 0)
    config = BenchConfig(env="toy", out=str(tmp_path / "plain"), K=[1], num_sequences=8, workers=0, progress=False,
                         plots=False)
    assert run_bench(config, ExpertAgent(batch_size=8)).status == "complete"
    assert pool_sizes[-1] == 8


# ----------------------------------------------------------------- rescore and resume: one rule


def test_a_contradictory_duplicate_result_line_is_a_difference_and_resume_refuses_it(finished_run, capsys):
    path = finished_run / "results.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    first = json.loads(lines[0])
    path.write_text("".join(lines) + json_line({**first, "success": [not s for s in first["success"]]}))
    capsys.readouterr()
    assert main(["rescore", str(finished_run)]) == 1
    printed = capsys.readouterr().out
    assert f"K={first['K']} index={first['index']}" in printed and "duplicate" in printed, printed
    before = path.read_bytes()
    assert bench(finished_run, K=(1, 2), n=3, carry=None) == EXIT_USAGE
    err = capsys.readouterr().err.strip()
    assert f"{path}:{len(lines) + 1} " in err and "line 1" in err and len(err.splitlines()) == 1, err
    assert path.read_bytes() == before


def test_an_identical_duplicate_result_line_changes_nothing(finished_run, capsys):
    path = finished_run / "results.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines) + lines[0])
    capsys.readouterr()
    assert main(["rescore", str(finished_run)]) == 0
    assert bench(finished_run, K=(1, 2), n=3, carry=None) == 0


@pytest.mark.parametrize("damage", [name for name in DAMAGE if name.startswith("turn ")])
def test_resume_refuses_a_turn_line_that_rescore_refuses(finished_run, capsys, damage):
    name, number, apply = DAMAGE[damage]
    apply(finished_run)
    capsys.readouterr()
    assert main(["rescore", str(finished_run)]) == EXIT_USAGE
    rescore_err = capsys.readouterr().err.strip()
    turns = (finished_run / name).read_bytes()
    assert bench(finished_run, K=(1, 2), n=3, carry=None) == EXIT_USAGE
    err = capsys.readouterr().err.strip()
    where = f"{finished_run / name}:{number} "
    assert where in rescore_err and where in err and "Traceback" not in err, err
    assert (finished_run / name).read_bytes() == turns  # nothing dropped or rewritten
