"""skillrise-train end to end with the tiny offline model: one full step, outputs, the GRPO baseline's task
attempts, bad input (missing model, no chat template, prompts over the context, NaN loss), resume, and one
full step on each landed benchmark backend."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
from collections import Counter
from pathlib import Path

import pytest

from conftest import need_data
from skillrise_train.cli import main, parse_config
from skillrise_train.config import TrainConfig

pytest.importorskip("trl")

TINY = ["--model", "tiny", "--max-new-tokens", "8", "--threads", "1"]


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_flags_map_one_to_one_to_config_fields():
    config = parse_config(["--env", "toy", "--K", "3", "--max-new-tokens", "5", "--no-lora", "--gamma", "0.5"])
    assert (config.env, config.K, config.max_new_tokens, config.lora, config.gamma) == ("toy", 3, 5, False, 0.5)
    assert parse_config([]) == TrainConfig()
    with pytest.raises(ValueError, match="unknown argument.s. --no-such-flag 1"):
        parse_config(["--no-such-flag", "1"])
    # backend options are a dict on both sides of the CLI (JSON on the command line), as in the bench
    config = parse_config(["--env", "rulebook", "--backend-options", '{"rules": 1}'])
    assert config.backend_options == {"rules": 1} and config.to_dict()["backend_options"] == {"rules": 1}
    assert TrainConfig(env="rulebook", backend_options={"rules": 1}) == config


def test_help_says_each_default_once(capsys):
    from skillrise_train.cli import build_parser

    text = build_parser().format_help()
    assert "(default: None)" not in text and "(default: False)\n  --no" not in text
    flat = " ".join(text.split())
    assert flat.count("(default:") == len(flat.split("(default:")) - 1
    for chunk in flat.split(" --"):
        assert chunk.count("(default:") <= 1, chunk
    # a one-way switch shows no "(default: True)": that is the field's value, not the switch's
    assert "--no-progress No progress line" in flat and "(default: True) --report-to" not in flat


def test_every_flag_in_the_docs_flags_table_parses():
    """docs/train.md's generated flags table names flags the trainer takes (it once listed --no-no-progress)."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parent.parent / "docs" / "train.md").read_text(encoding="utf-8")
    block = text.split("<!-- results: reference/train-flags -->")[1].split("<!-- /results -->")[0]
    names = [n for row in re.findall(r"^\| `([^`]+)` \|", block, re.M) for n in row.split(" / ")]
    assert "--no-progress" in names and not [n for n in names if n.startswith("--no-no-")]
    for name in names:
        try:
            parse_config([name])  # a switch
        except ValueError as exc:
            assert "unknown argument" not in str(exc) and "ambiguous" not in str(exc), (name, exc)


def test_unset_max_task_steps_means_each_backends_own_limit_in_training_and_evaluation():
    from skillrise_gym.backends import backend_class
    from skillrise_train.rollout import RolloutEngine
    from skillrise_train.rollout_setup import RolloutConfig
    from skillrise_gym.pools import PoolConfig

    assert TrainConfig().max_task_steps is None
    engine = RolloutEngine(RolloutConfig("toy", "skillrise", K=2, G=1, S=1))
    try:
        env = engine.pool.env_fns[0]()  # what every training env is built from
        assert env.unwrapped.max_task_steps == backend_class("toy").default_max_task_steps
        env.close()
    finally:
        engine.close()


def test_bad_config_values_are_rejected(capsys):
    assert main(["--algo", "ppo"]) == 2
    assert "algo must be one of" in capsys.readouterr().err
    assert main(["--G", "0"]) == 2
    assert main(["--threads", "-1"]) == 2
    assert "threads must be >= 0" in capsys.readouterr().err


def test_one_full_step_on_toy_writes_metrics_turns_and_checkpoint(tmp_path, capsys, monkeypatch):
    import skillrise_train.pacing

    monkeypatch.setattr(skillrise_train.pacing, "PROGRESS_SECONDS", 0.0)  # report after every round
    out = tmp_path / "run"
    code = main(["--env", "toy", *TINY, "--K", "2", "--G", "2", "--S", "2", "--steps", "1", "--max-task-steps", "2",
                 "--output-dir", str(out), "--eval-sequences", "1"])
    assert code == 0
    console = capsys.readouterr().out
    assert "success/pos" in console and "adv curate" in console and "eval step 1" in console
    # the table's header first, then a long rollout says where it is before its step's row (here after every
    # round but the last: in a log, as under pytest, the line is printed; on a terminal it is rewritten)
    progress = [line for line in console.splitlines() if line.startswith("  rollout of step 1: ")]
    assert progress and "trials done" in progress[0] and "tok/s" in progress[0]
    assert console.index("success/pos") < console.index(progress[0]) < console.index("   1 |")
    (metrics,) = _lines(out / "metrics.jsonl")
    for key in ("success/pos0", "success/pos1", "advantage/solve_mean", "advantage/curate_mean", "loss", "tokens_per_s"):
        assert key in metrics
    turns = _lines(out / "turns.jsonl")
    roles = Counter(t["role"] for t in turns)
    assert roles["curate"] == 2 * 2 * (2 - 1)  # S * G * (K - 1): one curate turn between tasks, per trial
    assert {t["position"] for t in turns} == {0, 1}
    assert all("advantage" in t["extra"] and "return" in t["extra"] for t in turns)
    assert (out / "checkpoint-1").is_dir() and (out / "final").is_dir()
    (evaluation,) = _lines(out / "eval.jsonl")
    assert evaluation["split"] == "test" and len(evaluation["success_by_position"]) == 2
    # the evaluation is a bench run of the policy on held-out sequences
    assert (out / "eval" / f"step-{evaluation['step']}" / "summary.json").exists()
    summary = json.loads((out / "eval" / "step-1" / "summary.json").read_text())
    assert summary["split"] == "test" and summary["agent"]["name"] == "skillrise-train" and summary["finished"] == 1


def test_grpo_baseline_attempts_the_same_tasks_without_document_or_curate(tmp_path):
    outs = {}
    for algo in ("skillrise", "grpo"):
        out = tmp_path / algo
        assert main(["--env", "toy", *TINY, "--algo", algo, "--K", "3", "--G", "2", "--steps", "1",
                     "--max-task-steps", "1", "--output-dir", str(out)]) == 0
        outs[algo] = _lines(out / "turns.jsonl")
    skillrise, grpo = outs["skillrise"], outs["grpo"]
    assert not [t for t in grpo if t["role"] == "curate"]
    # one solve step per task here, so solve turns == task attempts: the same tasks, the same number of times
    assert Counter(t["task_id"] for t in grpo) == Counter(t["task_id"] for t in skillrise if t["role"] == "solve")
    assert Counter(t["position"] for t in grpo) == Counter({0: 2, 1: 2, 2: 2})
    from skillrise_gym.prompts import COMPACT_EMPTY

    # --prompt-style auto gives the tiny model compact prompts, whose empty document reads COMPACT_EMPTY
    assert all(f"Skills: {COMPACT_EMPTY}" in t["prompt"] for t in grpo)
    assert all(t["response"].startswith("<action>") for t in grpo)  # the answer prefix is part of the answer


def test_missing_model_path_is_a_clear_error(tmp_path, capsys):
    assert main(["--env", "toy", "--model", str(tmp_path / "nowhere"), "--output-dir", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "not found" in err and "nowhere" in err


def test_model_without_chat_template_is_a_clear_error(tmp_path, capsys):
    from skillrise_gym.models import build_tiny_model

    path = Path(build_tiny_model(tmp_path / "plain"))
    (path / "chat_template.jinja").unlink(missing_ok=True)
    config = json.loads((path / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (path / "tokenizer_config.json").write_text(json.dumps(config))
    assert main(["--env", "toy", "--model", str(path), "--output-dir", str(tmp_path / "o")]) == 2
    assert "no chat template" in capsys.readouterr().err


def test_prompts_longer_than_the_budget_lose_their_middle(tmp_path):
    out = tmp_path / "run"
    assert main(["--env", "toy", *TINY, "--steps", "1", "--max-task-steps", "1", "--max-prompt-tokens", "64",
                 "--output-dir", str(out)]) == 0
    turns = _lines(out / "turns.jsonl")
    assert turns and all(t["prompt_tokens"] == 64 and t["extra"]["prompt_truncated"] for t in turns)
    (metrics,) = _lines(out / "metrics.jsonl")
    assert metrics["prompts_truncated"] == len(turns)


def test_nan_loss_stops_with_a_message_and_keeps_the_last_good_checkpoint(tmp_path, capsys, monkeypatch):
    import torch

    from skillrise_train.trainer import SkillRiseTrainer

    original = SkillRiseTrainer.rows_to_batch

    def poisoned(self, prompt_ids, completion_ids, advantages):
        batch = original(self, prompt_ids, completion_ids, advantages)
        if self.state.global_step == 1:  # the second step goes bad
            batch["advantages"] = torch.full_like(batch["advantages"], float("nan"))
        return batch

    monkeypatch.setattr(SkillRiseTrainer, "rows_to_batch", poisoned)
    out = tmp_path / "run"
    code = main(["--env", "toy", *TINY, "--steps", "3", "--max-task-steps", "1", "--output-dir", str(out)])
    assert code == 3
    err = capsys.readouterr().err
    assert "loss became nan" in err and "step 2" in err and "--resume" in err
    assert (out / "checkpoint-1").is_dir() and not (out / "checkpoint-2").exists()
    state = json.loads((out / "checkpoint-1" / "trainer_state.json").read_text())
    assert state["global_step"] == 1


def test_resume_continues_the_step_count_and_rng_state(tmp_path, capsys):
    common = ["--env", "toy", *TINY, "--K", "2", "--G", "2", "--max-task-steps", "2", "--seed", "3"]
    straight, interrupted = tmp_path / "straight", tmp_path / "interrupted"
    assert main([*common, "--steps", "2", "--output-dir", str(straight)]) == 0
    assert main([*common, "--steps", "1", "--output-dir", str(interrupted)]) == 0
    assert main([*common, "--steps", "2", "--output-dir", str(interrupted), "--resume"]) == 0
    assert "resuming from" in capsys.readouterr().out
    assert [m["step"] for m in _lines(interrupted / "metrics.jsonl")] == [1, 2]
    responses = {
        name: [(t["trial_id"], t["response"]) for t in _lines(folder / "turns.jsonl") if t["extra"]["step"] == 1]
        for name, folder in (("straight", straight), ("interrupted", interrupted))
    }
    # step 2 after a resume samples exactly what the uninterrupted run sampled: same sequences, same RNG
    assert responses["interrupted"] == responses["straight"]


def test_resume_without_a_checkpoint_is_a_clear_error(tmp_path, capsys):
    assert main(["--env", "toy", *TINY, "--output-dir", str(tmp_path / "empty"), "--resume"]) == 2
    assert "no complete checkpoint" in capsys.readouterr().err


def test_resume_skips_damaged_checkpoints_and_records_agree_with_the_one_it_takes(tmp_path, capsys):
    """Killed while saving (an empty checkpoint-3, a checkpoint-2 with a truncated optimizer) and late in a
    step (records of step 2 written, a torn line after them): --resume takes checkpoint-1, drops the later records, and the
    finished run holds each step's records once, identical to a run never killed (issue 11, items 5 and 6)."""
    from skillrise_train.checkpoints import MARKER, check_complete

    common = ["--env", "toy", *TINY, "--K", "2", "--G", "2", "--max-task-steps", "2", "--seed", "3"]
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    assert main([*common, "--steps", "2", "--output-dir", str(straight)]) == 0
    assert main([*common, "--steps", "2", "--output-dir", str(killed)]) == 0
    assert check_complete(killed / "checkpoint-1") is None and check_complete(killed / "checkpoint-2") is None
    optimizer = killed / "checkpoint-2" / "optimizer.pt"
    optimizer.write_bytes(optimizer.read_bytes()[: optimizer.stat().st_size // 2])
    (killed / "checkpoint-3").mkdir()
    turns = (killed / "turns.jsonl").read_text()
    (killed / "turns.jsonl").write_text(turns + turns.splitlines(keepends=True)[0][:40])  # a torn last line
    capsys.readouterr()
    assert main([*common, "--steps", "2", "--output-dir", str(killed), "--resume"]) == 0
    captured = capsys.readouterr()
    assert "resuming from" in captured.out and "checkpoint-1" in captured.out
    assert "skipping checkpoint-3" in captured.err and "skipping checkpoint-2" in captured.err
    assert "optimizer.pt has" in captured.err and "dropped records" in captured.err
    assert [m["step"] for m in _lines(killed / "metrics.jsonl")] == [1, 2]
    per_step = lambda folder: Counter(t["extra"]["step"] for t in _lines(folder / "turns.jsonl"))  # noqa: E731
    assert per_step(killed) == per_step(straight)
    responses = {
        name: [(t["extra"]["step"], t["trial_id"], t["response"]) for t in _lines(folder / "turns.jsonl")]
        for name, folder in (("straight", straight), ("killed", killed))
    }
    assert responses["killed"] == responses["straight"]
    assert check_complete(killed / "checkpoint-2") is None  # saved again, whole
    (killed / "checkpoint-2" / MARKER).unlink()
    assert "no completion marker" in check_complete(killed / "checkpoint-2")


# ------------------------------------------------------------------------------------ landed backends
def _one_step(env: str, tmp_path: Path, algo: str = "skillrise") -> list[dict]:
    out = tmp_path / env
    code = main(["--env", env, *TINY, "--K", "2", "--G", "2", "--steps", "1", "--max-task-steps", "2",
                 "--algo", algo, "--output-dir", str(out)])
    assert code == 0
    turns = _lines(out / "turns.jsonl")
    assert Counter(t["role"] for t in turns)["curate"] == (2 if algo == "skillrise" else 0)
    assert (out / "checkpoint-1").is_dir()
    (metrics,) = _lines(out / "metrics.jsonl")
    assert metrics["anchor/mean_group_size"] >= 1.0 and 0.0 <= metrics["anchor/repeated_share"] <= 1.0
    if algo == "gigpo":  # K tasks x G trials of single-task episodes, every turn with its advantage
        assert len({t["trial_id"] for t in turns}) == 2 * 2 and all(t["extra"]["algo"] == "gigpo" for t in turns)
    return turns


ALGOS = pytest.mark.parametrize("algo", ["skillrise", "gigpo"])


@pytest.mark.slow
@ALGOS
def test_one_full_step_on_webshop(tmp_path, algo):
    pytest.importorskip("bm25s")
    turns = _one_step("webshop", tmp_path, algo)
    assert {t["benchmark"] for t in turns} == {"webshop"}


def test_one_gigpo_step_on_the_probe_and_toy(tmp_path):
    for env in ("rulebook", "toy"):
        _one_step(env, tmp_path, "gigpo")


@pytest.mark.slow
@ALGOS
def test_one_full_step_on_alfworld(tmp_path, monkeypatch, algo):
    if importlib.util.find_spec("alfworld") is None:
        pytest.skip("alfworld is not installed (pip install 'skillrise-gym[alfworld]')")
    data = Path(os.environ.get("ALFWORLD_DATA") or Path(__file__).resolve().parents[2] / "shared" / "data" / "alfworld")
    if not (data.is_file() or (data / "json_2.1.1").is_dir() or any(data.glob("*.tar.xz"))):
        data = Path(__file__).resolve().parents[2] / "shared" / "data" / "alfworld"
    need_data(data, "ALFWorld game files ($ALFWORLD_DATA)")
    monkeypatch.setenv("ALFWORLD_DATA", str(data))
    turns = _one_step("alfworld", tmp_path, algo)
    assert {t["benchmark"] for t in turns} == {"alfworld"}


@pytest.mark.slow
@ALGOS
def test_one_full_step_on_scienceworld(tmp_path, algo):
    pytest.importorskip("scienceworld")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        if os.environ.get("SKILLRISE_REQUIRE_DATA") == "1":
            pytest.fail("ScienceWorld needs Java (SKILLRISE_REQUIRE_DATA=1: CI must not skip)")
        pytest.skip("ScienceWorld needs Java")
    turns = _one_step("scienceworld", tmp_path, algo)
    assert {t["benchmark"] for t in turns} == {"scienceworld"}


def test_several_updates_per_rollout_use_the_sampling_policy_as_old_policy(tmp_path):
    out = tmp_path / "run"
    assert main(["--env", "toy", *TINY, "--steps", "2", "--updates-per-rollout", "2", "--max-task-steps", "2",
                 "--G", "2", "--lr", "0.05", "--no-lora", "--output-dir", str(out)]) == 0
    metrics = _lines(out / "metrics.jsonl")
    assert [(m["step"], m["rollout"]) for m in metrics] == [(1, 1), (2, 1), (3, 2), (4, 2)]
    assert {t["extra"]["step"] for t in _lines(out / "turns.jsonl")} == {0, 1}  # two rollouts, not four
    # the second update of a rollout sees a moved policy: the ratio leaves 1 and the clip engages
    assert max(m["clip_ratio/region_mean"] for m in metrics) > 0
    assert (out / "checkpoint-2").is_dir() and (out / "checkpoint-4").is_dir()


def test_the_run_ends_with_what_it_did(tmp_path, capsys):
    out = tmp_path / "report"
    assert main(["--env", "rulebook", *TINY, "--K", "2", "--G", "2", "--steps", "1", "--max-task-steps", "1",
                 "--output-dir", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "what the run did: 4 solve turns" in printed and "2 curate turns" in printed
    assert "transfer_experiment.py" in printed
    from skillrise_train.cli import run_report

    report = run_report(out / "turns.jsonl")
    assert report["solve_turns"] == 4 and report["tasks"] == 4 and 0.0 <= report["solve_format_valid"] <= 1.0


def test_non_finite_weights_after_an_update_stop_before_they_are_saved(tmp_path, capsys, monkeypatch):
    import torch

    from skillrise_train.trainer import SkillRiseTrainer

    original = SkillRiseTrainer.training_step

    def poisoned(self, model, inputs, num_items_in_batch):
        loss = original(self, model, inputs, num_items_in_batch)  # a finite loss ...
        if self.state.global_step == 1:  # ... whose update in the second step is not
            for param in model.parameters():
                if param.grad is not None:
                    param.grad.fill_(float("inf"))
        return loss

    monkeypatch.setattr(SkillRiseTrainer, "training_step", poisoned)
    out = tmp_path / "run"
    code = main(["--env", "toy", *TINY, "--steps", "3", "--max-task-steps", "1", "--no-lora", "--output-dir", str(out)])
    assert code == 3
    err = capsys.readouterr().err
    assert "weights became non-finite" in err and "step 2" in err and "--resume" in err
    assert (out / "checkpoint-1").is_dir() and not (out / "checkpoint-2").exists()


def test_a_learning_rate_that_is_not_a_finite_positive_number_is_refused(capsys):
    for bad in ("inf", "nan", "0", "-1e-3"):
        assert main([f"--lr={bad}"]) == 2
        assert "lr must be a finite number > 0" in capsys.readouterr().err
    assert main(["--warmstart-lr", "inf"]) == 2


def test_a_k1_task_that_fails_to_load_gives_no_turns_and_the_rollout_goes_on():
    from skillrise_gym.backends.toy import COLOURS, ToyBackend
    from skillrise_train.rollout import RolloutEngine
    from skillrise_train.rollout_setup import RolloutConfig
    from skillrise_gym.pools import PoolConfig

    failing = [t.id for t in ToyBackend().list_tasks("train") if t.family in COLOURS[: len(COLOURS) // 2]]
    engine = RolloutEngine(RolloutConfig("toy", "grpo", K=1, G=2, S=8, max_task_steps=2, seed=0,
                                         backend_options={"fail_to_load": failing}))
    try:
        sequences = engine.sequences(0, 8)
        plans = engine.plan(sequences, tag="t")
        result = engine.play(plans, lambda prompts, prefixes, seeds: [_look_completion() for _ in prompts])
    finally:
        engine.close()
    assert set(result.success) == {p.trial_id for p in plans}  # every trial ended, none hung or crashed
    broken = {p.trial_id for p in plans if p.task_ids[0] in failing}
    assert broken and all(result.success[t] == [False] for t in broken)
    assert not {s.turn.trial_id for s in result.samples} & broken


def _look_completion():
    from skillrise_train.samples import Completion

    return Completion([0], [0], "<action>look</action>", False)


def _play_toy(workers: int, kill_on_call: int | None = None, **options):
    """One SkillRise rollout (K=2, S=2, G=2) on four toy envs (one per trial) in `workers` processes, answering
    'look' and a fixed skill; with `kill_on_call`, env worker 1 is killed (SIGKILL) just before that
    generation call. (tests/test_train_rollout.py plays fewer envs than trials.)"""
    import signal

    from skillrise_train.rollout import RolloutEngine

    from skillrise_train.samples import Completion
    from skillrise_train.rollout_setup import RolloutConfig
    from skillrise_gym.pools import PoolConfig

    engine = RolloutEngine(RolloutConfig("toy", "skillrise", K=2, G=2, S=2, max_task_steps=2, seed=0,
                                         pool=PoolConfig(workers=workers, timeout=2.0 if workers else None),
                                         backend_options=options, envs=4))
    calls = {"n": 0}

    def generate(prompts, prefixes, seeds=None):
        calls["n"] += 1
        if calls["n"] == kill_on_call:
            os.kill(engine.pool._procs[1].pid, signal.SIGKILL)
        return [Completion([0], [0], "<skill>press the switches</skill>" if "skill" in p.lower()[:200] and
                           "rewrite" in p.lower() else "<action>look</action>") for p in prompts]

    try:
        plans = engine.plan(engine.sequences(0, 2), tag="t")
        return plans, engine.play(plans, generate)
    finally:
        engine.close()


def test_a_killed_env_worker_mid_rollout_is_replaced_and_its_trials_replayed():
    """Issue 11 item 16: the trials on the dead worker start again on its replacement and the rollout ends
    with the same turns as one never interrupted (the others were not disturbed)."""
    plans, calm = _play_toy(workers=2)
    _plans, killed = _play_toy(workers=2, kill_on_call=2)
    assert killed.replayed == 2 and not killed.dropped  # worker 1 held envs 1 and 3
    turns = lambda result: sorted((s.turn.trial_id, s.turn.position, s.turn.role, s.turn.step_index, s.turn.prompt)  # noqa: E731
                                  for s in result.samples)
    assert turns(killed) == turns(calm)
    assert killed.success == calm.success and killed.task_rewards == calm.task_rewards


def test_a_hung_env_worker_is_replaced_and_its_trials_dropped_with_a_reason_never_a_hang(caplog):
    from skillrise_train.rollout import RolloutEngine
    from skillrise_train.rollout_setup import RolloutConfig
    from skillrise_gym.pools import PoolConfig

    probe = RolloutEngine(RolloutConfig("toy", "skillrise", K=2, G=2, S=2, max_task_steps=2, seed=0))
    try:
        first, second = probe.sequences(0, 2)
    finally:
        probe.close()
    hang = first.tasks[1].id  # the first sequence's second task never answers a step
    with caplog.at_level("WARNING", logger="skillrise_train"):
        plans, result = _play_toy(workers=2, hang_on=[hang])
    hung = {p.trial_id for p in plans if hang in p.task_ids}
    assert hung and set(result.dropped) >= hung
    assert all("died or hung 2 times" in reason for reason in result.dropped.values())
    assert not {s.turn.trial_id for s in result.samples} & set(result.dropped)
    for plan in plans:  # every trial not dropped played to its end
        if plan.trial_id not in result.dropped:
            assert len(result.success[plan.trial_id]) == 2
    assert "timed out" in caplog.text and "dropping trial" in caplog.text


def test_a_warm_start_reports_what_it_taught(tmp_path, capsys, monkeypatch):
    import skillrise_train.warmstart as warmstart

    batches = []
    original = warmstart.warm_start

    def recording(*args, **kwargs):
        batches.append(kwargs.get("batch_size"))
        return original(*args, **kwargs)

    monkeypatch.setattr(warmstart, "warm_start", recording)
    out = tmp_path / "run"
    assert main(["--env", "rulebook", *TINY, "--K", "2", "--G", "2", "--S", "2", "--steps", "1", "--max-task-steps", "1",
                 "--warmstart-steps", "3", "--warmstart-sequences", "4", "--warmstart-batch", "5",
                 "--output-dir", str(out), "--backend-options", '{"rules": 1, "bins": 3}']) == 0
    assert batches == [5]  # --warmstart-batch reaches the warm start
    printed = capsys.readouterr().out
    assert "warm start: follows a note" in printed
    # a long warm start shows where it is: a line per tenth of its steps (here every step), the last one here
    assert re.search(r"warm start step 3/3: loss \d+\.\d{3}, \d+\.\d s/step, about 0 s left", printed)
    report = json.loads((out / "warmstart.json").read_text())
    assert set(report) >= {"follow", "copy", "valid", "sequences", "steps"} and report["steps"] == 3
    assert 0.0 <= report["copy"] <= 1.0 and report["sequences"] == 40


def test_weights_too_large_to_sample_from_stop_with_a_message(tmp_path, capsys, monkeypatch):
    """Finite weights that overflow in the forward pass (an absurd but finite --lr) make torch's sampler
    fail on NaN probabilities: exit 3 with the advice, the last good checkpoint kept (issue 11 item 7)."""
    from skillrise_train.trainer import SkillRiseTrainer

    original = SkillRiseTrainer.generate_ids

    def overflowing(self, *args, **kwargs):
        if self.state.global_step >= 1:
            raise RuntimeError("probability tensor contains either `inf`, `nan` or element < 0")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(SkillRiseTrainer, "generate_ids", overflowing)
    out = tmp_path / "run"
    code = main(["--env", "toy", *TINY, "--steps", "3", "--max-task-steps", "1", "--no-lora", "--output-dir", str(out)])
    assert code == 3
    err = capsys.readouterr().err
    assert "became NaN or infinite while sampling" in err and "lower --lr" in err
    assert (out / "checkpoint-1").is_dir() and not (out / "checkpoint-2").exists()
