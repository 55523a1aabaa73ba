"""skillrise-bench --carry / --prompt-style on the rulebook env: turn counts per carry mode, the same sequences
in every mode, resuming and adding modes, the side-by-side summary and plots, bad arguments."""

from __future__ import annotations

import dataclasses
import json
import os
import re
from pathlib import Path
from typing import Any, ClassVar, Sequence

import pytest
from test_bench_runner import PNG_MAGIC, assert_consistent, results

from skillrise_gym import prompts
from skillrise_gym.agents.base import Agent, AgentOutput
from skillrise_gym.bench.cli import main
from skillrise_gym.bench.runner import BenchConfig, run_bench
from skillrise_gym.records import read_turns

MODES = ("skill", "none", "reflect")
RULE = re.compile(r"(\w+) items go in the (\w+) bin")


def bench(out: Path, *extra: str, agent: str = "expert", K: tuple[int, ...] = (1, 3), n: int = 4,
          env: str = "rulebook", carry: Sequence[str] | None = MODES) -> int:
    args = ["--env", env, "--agent", agent, "--K", *map(str, K), "--num-sequences", str(n), "--out", str(out),
            "--env-workers", "0", "--no-progress", *extra]
    if carry is not None:
        args += ["--carry", *carry]
    return main(args)


def summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


def by_key(rows: list[dict]) -> dict[tuple[int, int], dict]:
    return {(r["K"], r["index"]): r for r in rows}


class Learner(Agent):
    """A scripted agent that carries what it learns only through the env: it answers a bin from the rules
    written in the skill document (or the reflections), else the first bin; between tasks it writes every rule
    it knows plus the one the feedback revealed (in <remark> tags for carry reflect, <skill> otherwise).
    `stop_after`: a Ctrl-C after that many answers."""

    name: ClassVar[str] = "learner"

    def __init__(self, stop_after: int | None = None) -> None:
        self.calls = 0
        self.stop_after = stop_after

    def act(self, observations: Sequence[dict[str, Any]], infos: Sequence[dict[str, Any]] | None = None) -> list[AgentOutput]:
        outputs = []
        for observation, info in zip(observations, infos):
            if self.stop_after is not None and self.calls >= self.stop_after:
                raise KeyboardInterrupt
            self.calls += 1
            known = dict(RULE.findall(observation["skill_document"]))
            if int(observation["role"]) == 1:
                known.update(RULE.findall(observation["observation"]))
                tag = "remark" if info["carry"] == "reflect" else "skill"
                text = "; ".join(f"{kind} items go in the {colour} bin" for kind, colour in sorted(known.items()))
                outputs.append(AgentOutput(f"<{tag}>{text}</{tag}>"))
            else:
                kind = re.search(r"made of (\w+)", observation["task"]).group(1)
                answer = f"{known[kind]} bin" if kind in known else observation["admissible_actions"][0]
                outputs.append(AgentOutput(f"<action>{answer}</action>"))
        return outputs


def learner_config(out: Path, carry: Sequence[str], **overrides) -> BenchConfig:
    fields = dict(env="rulebook", out=str(out), K=[1, 3], num_sequences=4, carry=list(carry), workers=0,
                  progress=False, plots=False)
    fields.update(overrides)
    return BenchConfig(**fields)


@pytest.mark.parametrize("agent", ["expert", "random"])
def test_every_carry_mode_plays_the_same_sequences_with_its_own_turns(tmp_path, capsys, agent):
    out = tmp_path / "run"
    assert bench(out, agent=agent, n=5) == 0
    table = capsys.readouterr().out
    assert (out / "carry.json").exists() and not (out / "manifest.json").exists()
    rows = {mode: by_key(results(out / f"carry-{mode}")) for mode in MODES}
    assert set(rows["skill"]) == {(K, i) for K in (1, 3) for i in range(5)}
    for mode in MODES:
        member = out / f"carry-{mode}"
        assert_consistent(member, set(rows["skill"]))
        assert json.loads((member / "manifest.json").read_text())["identity"]["carry"] == mode
        for (K, i), row in rows[mode].items():
            # the same pinned sequence in every mode
            assert row["task_ids"] == rows["skill"][(K, i)]["task_ids"] and row["carry"] == mode
            assert row["trial_id"] == rows["skill"][(K, i)]["trial_id"]
            between = 0 if mode == "none" else K - 1
            assert row["curate_calls"] == between and row["solve_calls"] == K  # rulebook: one step per task
            assert row["calls"] == K + between
        turns = read_turns(member / "turns.jsonl")
        assert {t.extra["carry"] for t in turns} == {mode}
        curates = [t for t in turns if t.role == "curate"]
        solves = [t for t in turns if t.role == "solve"]
        if mode == "none":
            assert not curates and all("Skills: (none yet)" in t.prompt for t in solves)
        elif mode == "skill":
            assert len(curates) == 5 * 2 and all(t.prompt.startswith("Rewrite the skills") for t in curates)
        else:
            assert len(curates) == 5 * 2 and all(t.prompt.startswith("Reflect on this attempt") for t in curates)
            assert all(prompts.EXPERIENCE_HEADING in t.prompt for t in solves)
    if agent == "expert":
        assert all(r["success"] == [True] * r["K"] for mode in MODES for r in rows[mode].values())
    else:  # K=1 has no between-task turn: the random agent plays it identically in every mode
        for i in range(5):
            assert rows["none"][(1, i)]["success"] == rows["skill"][(1, i)]["success"] == rows["reflect"][(1, i)]["success"]

    top = summary(out)
    assert top["layout"] == "carry" and top["carry"] == list(MODES) and top["status"] == "complete"
    assert set(top["by_carry"]) == set(MODES) and top["finished"] == top["requested"] == 3 * 2 * 5
    for mode in MODES:
        member = top["by_carry"][mode]
        assert member["carry"] == mode and member["finished"] == 10
        block = next(b for b in member["blocks"] if b["K"] == 3)
        assert block["curate_calls_per_sequence"] == (0 if mode == "none" else 2)
        assert json.loads((out / f"carry-{mode}" / "summary.json").read_text())["carry"] == mode
    # the table: one row per (K, carry), and the paired difference from the first mode
    assert "| K | carry | seqs | success [95% CI] | vs skill [95% CI] |" in table
    for K in (1, 3):
        for mode in MODES:
            assert re.search(rf"^\| {K} \| {mode} \| 5 \| ", table, re.M), (K, mode)
    if agent == "expert":
        # 5/5 sequences solved: the Wilson interval [0.566, 1] (never zero-width); the paired difference of two
        # perfect modes is exactly 0 (its bootstrap)
        assert "| 3 | none | 5 | 1.00 [0.57, 1.00] | +0.00 [+0.00, +0.00] |" in table
    assert table == (out / "summary.md").read_text() + "\n"  # printed on stdout too
    import matplotlib.image

    for name in ("success_by_position.png", "success_vs_K.png"):
        assert (out / name).read_bytes().startswith(PNG_MAGIC)
    assert matplotlib.image.imread(out / "success_by_position.png").shape[1] > 700  # one panel per K
    assert not list(out.glob("carry-*/*.png"))  # plots only at the top


def test_carry_reaches_later_tasks_only_through_the_env(tmp_path):
    out = tmp_path / "run"
    outcome = run_bench(learner_config(out, ["none", "skill", "reflect"], K=[4], num_sequences=12), Learner())
    assert outcome.status == "complete"
    rows = {mode: by_key(results(out / f"carry-{mode}")) for mode in ("none", "skill", "reflect")}
    for key, none in rows["none"].items():
        assert none["success"][0] == rows["skill"][key]["success"][0]  # nothing is carried into the first task
        assert rows["skill"][key]["success"] == rows["reflect"][key]["success"]  # both carry the same rules
    later = {mode: sum(sum(r["success"][1:]) for r in rows[mode].values()) for mode in rows}
    assert later["skill"] > later["none"]
    difference = outcome.summary["difference"]
    assert difference["reference"] == "none"
    assert difference["by_carry"]["skill"][0]["mean"] > 0 and difference["by_carry"]["skill"][0]["sequences"] == 12


def test_prompt_style_reaches_the_env_and_the_manifest(tmp_path):
    compact, full = tmp_path / "compact", tmp_path / "full"
    assert bench(compact, "--no-plots", K=(2,), n=2, carry=["skill", "reflect"]) == 0
    assert bench(full, "--no-plots", "--prompt-style", "full", K=(2,), n=2, carry=["skill", "reflect"]) == 0
    for out, style in ((compact, "compact"), (full, "full")):
        assert summary(out)["prompt_style"] == style
        assert json.loads((out / "carry-skill" / "manifest.json").read_text())["identity"]["prompt_style"] == style
        turns = read_turns(out / "carry-skill" / "turns.jsonl") + read_turns(out / "carry-reflect" / "turns.jsonl")
        solve = [t.prompt for t in turns if t.role == "solve"]
        assert all(("## Task" in p) == (style == "full") for p in solve)
        reflect = [t.prompt for t in turns if t.role == "curate" and t.extra["carry"] == "reflect"]
        assert reflect and all(p.startswith("You are reflecting") == (style == "full") for p in reflect)
    assert bench(full, "--no-plots", K=(2,), n=2, carry=["skill"]) == 2  # the backend's style is compact


def test_interrupted_run_resumes_every_mode_without_replaying(tmp_path):
    out = tmp_path / "run"
    modes = ["skill", "none", "reflect"]
    # per mode: K=1 4 x 1 call, K=3 4 x 5 calls (skill, reflect) or 4 x 3 (none): skill 24, none 16, reflect 24
    first = Learner(stop_after=24 + 10)
    assert run_bench(learner_config(out, modes), first).status == "interrupted"
    assert summary(out)["status"] == "interrupted"
    before = {mode: results(out / f"carry-{mode}") if (out / f"carry-{mode}" / "results.jsonl").exists() else []
              for mode in modes}
    assert len(before["skill"]) == 8 and 0 < len(before["none"]) < 8 and before["reflect"] == []
    assert summary(out)["by_carry"]["skill"]["status"] == "complete"

    again = Learner()
    assert run_bench(learner_config(out, modes), again).status == "complete"
    played = 0
    for mode in modes:
        after = results(out / f"carry-{mode}")
        assert after[: len(before[mode])] == before[mode]
        played += sum(r["calls"] for r in after[len(before[mode]):])
        assert_consistent(out / f"carry-{mode}", {(K, i) for K in (1, 3) for i in range(4)})
    assert again.calls == played  # only the unfinished sequences were played
    assert summary(out)["session"]["sequences"] == (8 - len(before["none"])) + 8

    # a kill between a sequence's turns and its result line in one mode: only that sequence is replayed
    rows = results(out / "carry-none")
    (out / "carry-none" / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:-1]))
    third = Learner()
    assert run_bench(learner_config(out, modes), third).status == "complete"
    assert third.calls == rows[-1]["calls"] and summary(out)["session"]["sequences"] == 1
    assert_consistent(out / "carry-none", {(K, i) for K in (1, 3) for i in range(4)})
    fourth = Learner()
    assert run_bench(learner_config(out, modes), fourth).status == "complete" and fourth.calls == 0


def test_adding_a_mode_later_reuses_the_others(tmp_path, capsys):
    out = tmp_path / "run"
    assert bench(out, "--no-plots", carry=None) == 0  # the default: the single-mode layout of before
    assert (out / "manifest.json").exists() and not (out / "carry.json").exists() and not list(out.glob("carry-*"))
    flat = summary(out)
    assert flat["carry"] == "skill" and set(flat["by_carry"]) == {"skill"}
    assert flat["by_carry"]["skill"]["blocks"] == flat["blocks"]
    assert {t.extra["carry"] for t in read_turns(out / "turns.jsonl")} == {"skill"}
    old_results, old_turns = (out / "results.jsonl").read_bytes(), (out / "turns.jsonl").read_bytes()

    assert bench(out, "--no-plots", carry=["skill", "none"]) == 0  # the single-mode run is adopted
    assert not (out / "manifest.json").exists() and (out / "carry.json").exists()
    assert (out / "carry-skill" / "results.jsonl").read_bytes() == old_results
    assert (out / "carry-skill" / "turns.jsonl").read_bytes() == old_turns
    top = summary(out)
    assert top["by_carry"]["skill"]["session"]["sequences"] == 0 and top["by_carry"]["none"]["session"]["sequences"] == 8

    none_results = (out / "carry-none" / "results.jsonl").read_bytes()
    assert bench(out, "--no-plots", carry=["skill", "none", "reflect"]) == 0
    assert summary(out)["session"]["sequences"] == 8  # reflect only
    assert (out / "carry-none" / "results.jsonl").read_bytes() == none_results
    assert (out / "carry-skill" / "results.jsonl").read_bytes() == old_results
    assert bench(out, "--no-plots", "--num-sequences", "5", carry=["none"]) == 0  # one mode, one more sequence per K
    assert summary(out)["session"]["sequences"] == 2 and set(summary(out)["by_carry"]) == {"none"}
    assert bench(out, "--no-plots", carry=None) == 0  # the default on a several-modes directory resumes carry-skill
    assert summary(out)["session"]["sequences"] == 0 and not (out / "manifest.json").exists()
    capsys.readouterr()

    assert bench(out, "--no-plots", "--seed", "3", carry=["none"]) == 2
    assert "seed: 0 in the directory, 3 now" in capsys.readouterr().err

    # a single-mode run that measured something else is refused and left as it was
    other = tmp_path / "other"
    assert bench(other, "--no-plots", carry=None) == 0
    capsys.readouterr()
    assert bench(other, "--no-plots", agent="random", carry=["skill", "none"]) == 2
    assert "agent:" in capsys.readouterr().err
    assert (other / "manifest.json").exists() and not (other / "carry.json").exists() and not list(other.glob("carry-*"))


def test_an_adoption_cut_short_is_finished_by_the_next_start(tmp_path, monkeypatch):
    out = tmp_path / "run"
    assert bench(out, "--no-plots", carry=None) == 0
    old_results = (out / "results.jsonl").read_bytes()
    real_replace = os.replace

    def killed_before_the_manifest(src, dst):
        if Path(dst) == out / "carry-skill" / "manifest.json":
            raise KeyboardInterrupt("killed")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", killed_before_the_manifest)
    assert bench(out, "--no-plots", carry=["skill", "none"]) == 130  # interrupted (one line, no traceback)
    monkeypatch.setattr(os, "replace", real_replace)
    assert (out / "manifest.json").exists() and (out / "carry-skill" / "results.jsonl").exists()
    assert bench(out, "--no-plots", carry=["skill", "none"]) == 0
    assert (out / "carry-skill" / "results.jsonl").read_bytes() == old_results
    assert summary(out)["by_carry"]["skill"]["session"]["sequences"] == 0
    assert_consistent(out / "carry-skill", {(K, i) for K in (1, 3) for i in range(4)})


def test_a_run_directory_from_before_carry_modes_still_resumes(tmp_path):
    out = tmp_path / "run"
    assert bench(out, "--no-plots", env="toy", carry=None) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["identity"]["carry"] == "skill" and manifest["identity"]["prompt_style"] == "full"
    del manifest["identity"]["carry"], manifest["identity"]["prompt_style"]  # as written before carry modes
    (out / "manifest.json").write_text(json.dumps(manifest))
    assert bench(out, "--no-plots", env="toy", carry=None) == 0
    assert summary(out)["session"]["sequences"] == 0
    assert bench(out, "--no-plots", "--prompt-style", "compact", env="toy", carry=None) == 2


def test_bad_carry_and_style_arguments_are_reported(tmp_path, capsys, monkeypatch):
    assert bench(tmp_path / "a", carry=["skill", "bogus"]) == 2
    assert ("--memory: unknown mode 'bogus'; known: skill, none, reflect (what the env carries) and the memory methods "
            "reflexion, expel, awm, dc, ace") in capsys.readouterr().err
    assert bench(tmp_path / "b", "--prompt-style", "tiny") == 2
    assert "--prompt-style: unknown prompt style 'tiny'; known styles: full, compact" in capsys.readouterr().err
    monkeypatch.setitem(prompts.PROFILES, "rulebook", dataclasses.replace(prompts.PROFILES["rulebook"], reflect=False))
    assert bench(tmp_path / "c", carry=["skill", "reflect"]) == 2
    assert "carry mode 'reflect' needs a reflect prompt, and rulebook has none" in capsys.readouterr().err
    assert bench(tmp_path / "d", carry=["skill", "none"]) == 0  # the other modes still work without it
    assert not any((tmp_path / d).exists() for d in "abc")
    with pytest.raises(ValueError, match="at least one mode"):
        BenchConfig(env="rulebook", out=str(tmp_path / "e"), carry=[])
