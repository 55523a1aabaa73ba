"""Output folders of `skillrise-train`, `skillrise-bench` and benchmarks/experiments/transfer_experiment.py
(issue 46, items 1-4 and part of 13): two experiments never share a work dir, the trainer never writes into or
deletes a user's files, --fresh deletes only the experiment's own folders, --resume with other settings is
refused naming each difference, a damaged record line is one line, and an output folder that is a file, sits
under a file or has an unusable .lock is one line (exit 2) in both CLIs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("trl")

from skillrise_train.cli import main  # noqa: E402

from test_reliability_train import TINY, _lines, _steps  # noqa: E402  (the same tiny runs as there)


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


@pytest.fixture(scope="module")
def one_step_run(tmp_path_factory) -> Path:
    """A finished one-step run (checkpoint-1, final/), made once; tests work on copies (`_copy`)."""
    out = tmp_path_factory.mktemp("base") / "run"
    assert main([*TINY, "--steps", "1", "--output-dir", str(out)]) == 0
    return out


def _copy(run: Path, tmp_path: Path) -> Path:
    out = tmp_path / "run"
    shutil.copytree(run, out)
    return out


# ------------------------------------------------------------------------ item 1: one experiment per work dir
def test_a_second_experiment_on_a_work_dir_in_use_is_refused_before_it_touches_anything(tmp_path, monkeypatch, capsys,
                                                                                         transfer_experiment):
    """A rerun (or a scheduler's retry) while the first experiment runs used to delete the running arm's folder;
    now the work dir is locked for the whole experiment and the second invocation stops at once, one line
    naming the folder."""
    from skillrise_gym.bench.store import _lock

    module = transfer_experiment
    ran = []
    monkeypatch.setattr(module, "run_seed", lambda *a, **k: ran.append(a) or {})
    work = tmp_path / "work"
    (work / "skillrise").mkdir(parents=True)
    (work / "skillrise" / "metrics.jsonl").write_text('{"step": 1}\n')
    held = _lock(work)  # what the first experiment holds while it runs
    try:
        for extra in ([], ["--fresh"]):
            code = module.main(["--work-dir", str(work), "--results-dir", str(tmp_path / "r"), *extra])
            assert code == 2
            err = _one_line_error(capsys)
            assert str(work) in err and "--work-dir" in err
    finally:
        held.close()
    assert not ran and (work / "skillrise" / "metrics.jsonl").exists()


def test_an_arm_folder_a_trainer_is_writing_to_is_never_deleted(tmp_path, transfer_experiment):
    """train_arm removed an unfinished arm's folder with shutil.rmtree before the trainer took its lock: the
    folder of a trainer still running went. Now the trainer's --overwrite clears it under its lock, which a
    running trainer holds: refused, nothing deleted."""
    from skillrise_train.checkpoints import lock_output_dir

    module = transfer_experiment
    work = tmp_path / "work"
    arm = work / "skillrise"
    arm.mkdir(parents=True)
    (arm / "metrics.jsonl").write_text('{"step": 1, "rollout": 1}\n')  # a run in progress: no final/ yet
    (arm / "config.json").write_text(json.dumps({"env": "rulebook", "algo": "skillrise", "K": 2, "steps": 1}))
    evaluated = work / "eval-bench" / "skillrise"
    evaluated.mkdir(parents=True)
    (evaluated / "manifest.json").write_text("{}")
    held = lock_output_dir(arm)
    try:
        with pytest.raises(SystemExit, match="another skillrise-train process"):
            module.train_arm("skillrise", "tiny", module.Preset(K=2, G=2, S=1, steps=1, warmstart_steps=0, threads=1),
                             work, print)
    finally:
        held.close()
    assert (arm / "metrics.jsonl").read_text() == '{"step": 1, "rollout": 1}\n'
    assert (evaluated / "manifest.json").exists()


def test_an_arm_stopped_mid_run_is_continued_from_its_checkpoint_to_the_same_weights(tmp_path, transfer_experiment):
    """A long experiment's process ends with the session (the decisive experiment: 34 stages of ~35 min).
    With `save_every`, an arm stopped after a checkpoint is continued from it by the trainer's --resume, not
    started over, and ends with the bits of the run that never stopped; without it, it is started over."""
    import hashlib

    module = transfer_experiment
    preset = module.Preset(K=2, G=2, S=1, steps=4, warmstart_steps=0, threads=1)

    def digest(folder: Path) -> str:
        return hashlib.sha256(b"".join(p.read_bytes() for p in sorted(folder.rglob("*.safetensors")))).hexdigest()

    whole = tmp_path / "whole"
    module.train_arm("skillrise", "tiny", preset, whole, print, save_every=2)
    stopped = tmp_path / "stopped"
    shutil.copytree(whole, stopped)
    arm = stopped / "skillrise"
    # the process ended in step 4: checkpoint-2 complete, step 3 recorded, no checkpoint-4 and no final/
    shutil.rmtree(arm / "final")
    shutil.rmtree(arm / "checkpoint-4")
    (arm / "wall_seconds.txt").unlink()
    metrics = (arm / "metrics.jsonl").read_text().splitlines()
    (arm / "metrics.jsonl").write_text("\n".join(line for line in metrics
                                                 if json.loads(line).get("step", 0) <= 3) + "\n")
    said: list[str] = []
    result = module.train_arm("skillrise", "tiny", preset, stopped, said.append, save_every=2)
    assert any("continuing the unfinished run" in line for line in said), said
    assert [r["step"] for r in result["curve"]] == [1, 2, 3, 4]  # each step recorded once
    assert digest(arm / "final") == digest(whole / "skillrise" / "final")
    assert float((arm / "wall_seconds.txt").read_text()) > 0


# ------------------------------------------------------------------------ item 2: the user's files
@pytest.mark.parametrize("mode", [[], ["--overwrite"], ["--resume"]], ids=["plain", "overwrite", "resume"])
def test_a_folder_holding_files_the_trainer_did_not_write_is_refused_naming_them(tmp_path, capsys, mode):
    """The trainer replaced a user's README.md and config.json, and --overwrite deleted their runs/ and eval/;
    now a folder it has not written to must be empty, and one holding other files is refused, untouched."""
    out = tmp_path / "mine"
    (out / "runs" / "old").mkdir(parents=True)
    (out / "eval").mkdir()
    (out / "eval" / "scores.csv").write_text("1,2\n")
    (out / "README.md").write_text("my notes")
    (out / "config.json").write_text('{"my": "settings"}')
    before = sorted(str(p.relative_to(out)) for p in out.rglob("*"))
    assert main([*TINY, "--steps", "1", "--output-dir", str(out), *mode]) == 2
    err = _one_line_error(capsys)
    assert "README.md" in err and "eval" in err and "runs" in err and "did not write" in err
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.name != ".lock") == before
    assert (out / "README.md").read_text() == "my notes" and (out / "config.json").read_text() == '{"my": "settings"}'


def test_a_run_folder_keeps_the_users_files_through_overwrite_and_a_fresh_resume(one_step_run, tmp_path, capsys):
    """In a folder the trainer made (its marker), --overwrite and a --resume with no complete checkpoint delete
    the run's own outputs and keep what the user added; a run of an older version (config.json, no marker)
    is still a run."""
    from skillrise_train.checkpoints import MARKER, RUN_MARKER

    out = _copy(one_step_run, tmp_path)
    assert (out / RUN_MARKER).is_file()
    (out / "notes.txt").write_text("mine")
    (out / "data").mkdir()
    assert main([*TINY, "--steps", "1", "--output-dir", str(out), "--overwrite"]) == 0
    assert (out / "notes.txt").read_text() == "mine" and (out / "data").is_dir() and _steps(out) == [1]
    (out / "checkpoint-1" / MARKER).unlink()
    shutil.rmtree(out / "final")
    assert main([*TINY, "--steps", "1", "--output-dir", str(out), "--resume"]) == 0
    assert (out / "notes.txt").read_text() == "mine" and _steps(out) == [1]
    (out / RUN_MARKER).unlink()  # a run written before the marker existed
    capsys.readouterr()
    assert main([*TINY, "--steps", "2", "--output-dir", str(out), "--resume"]) == 0
    assert _steps(out) == [1, 2] and (out / RUN_MARKER).is_file()


# ------------------------------------------------------------------------ item 3: --fresh
def test_fresh_deletes_only_the_experiments_own_folders(tmp_path, monkeypatch, transfer_experiment):
    """--fresh used to rmtree the whole --work-dir, unrelated work included."""
    module = transfer_experiment
    monkeypatch.setattr(module, "run_seed", lambda p, work, args, log, shared: {
        "preset": {}, "arms": {}, "evaluations": {}, "ceilings": {}})
    monkeypatch.setattr(module, "markdown", lambda report: "")
    monkeypatch.setattr(module, "plots", lambda report: [])
    work = tmp_path / "work"
    for seed_dir in (work, work / "seed1"):
        for own in ("untrained", "untrained-lamer", "reading-first", "eval-bench/skillrise", "eval-reading/own",
                    "eval-repeat/grpo", "eval-bench/perfect-curator"):
            (seed_dir / own).mkdir(parents=True)
            (seed_dir / own / "config.json").write_text("{}")
        arm = seed_dir / "skillrise"
        assert main([*TINY, "--steps", "1", "--output-dir", str(arm)]) == 0 if seed_dir == work else True
        if seed_dir != work:
            shutil.copytree(work / "skillrise", arm)
        (arm / "wall_seconds.txt").write_text("1.0\n")
        (arm / "my-notes.txt").write_text("mine")
        (seed_dir / "notes.txt").write_text("mine")
        (seed_dir / "eval-bench" / "my-plot.png").write_text("mine")
    (work / "tiny-96x2").mkdir()
    (work / "tiny-96x2" / "config.json").write_text("{}")
    (work / "other-project" / "checkpoint-3").mkdir(parents=True)
    assert module.main(["--fresh", "--seeds", "0", "1", "--work-dir", str(work),
                        "--results-dir", str(tmp_path / "r")]) == 0
    for seed_dir in (work, work / "seed1"):
        assert (seed_dir / "notes.txt").read_text() == "mine"
        assert (seed_dir / "eval-bench" / "my-plot.png").exists()
        assert (seed_dir / "skillrise" / "my-notes.txt").read_text() == "mine"
        for own in ("untrained", "untrained-lamer", "reading-first", "eval-bench/skillrise", "eval-reading",
                    "eval-repeat", "eval-bench/perfect-curator"):
            assert not (seed_dir / own).exists(), own
        arm = seed_dir / "skillrise"
        assert not any((arm / name).exists() for name in ("metrics.jsonl", "turns.jsonl", "final", "checkpoint-1",
                                                            "config.json", "wall_seconds.txt"))
    assert not (work / "tiny-96x2").exists() and (work / "other-project" / "checkpoint-3").is_dir()


# ------------------------------------------------------------------------ item 4: --resume with other settings
def test_resume_with_other_settings_is_refused_naming_each_difference(one_step_run, tmp_path, capsys):
    """--K 3 --seed 9 on a K=2 run mixed K=2 and K=3 steps in one turns.jsonl; --env elsewhere ran on; --no-lora
    on a LoRA run was a traceback. Now each is refused before anything is written, one line naming the
    fields with both values."""
    out = _copy(one_step_run, tmp_path)
    config = (out / "config.json").read_text()
    turns = (out / "turns.jsonl").read_text()
    capsys.readouterr()
    for changed, says in (
        (["--K", "3", "--seed", "9"], ("K: 2 in the run, 3 now", "seed: 3 in the run, 9 now")),
        (["--env", "rulebook"], ("env: 'toy' in the run, 'rulebook' now",)),
        (["--no-lora"], ("lora: True in the run, False now",)),
        (["--prompt-style", "full"], ("prompt_style: 'compact' in the run, 'full' now",)),
        (["--max-task-steps", "3"], ("max_task_steps: 2 in the run, 3 now",)),
    ):
        argv = [*TINY, "--steps", "2", "--output-dir", str(out), "--resume", *changed]
        assert main(argv) == 2, changed
        err = _one_line_error(capsys)
        assert all(s in err for s in says), err
        assert "--resume" in err
        assert (out / "config.json").read_text() == config and (out / "turns.jsonl").read_text() == turns
    assert _steps(out) == [1]


def test_resume_may_change_how_it_runs_and_takes_the_runs_resolved_defaults(one_step_run, tmp_path, capsys):
    """More steps, other threads, env pool, save and eval intervals are allowed; a setting left at its default
    ("auto", unset) takes the run's recorded value: the run recorded max_task_steps 2 and prompt style compact,
    and a resume without --max-task-steps plays what the uninterrupted run played (toy's own limit is 8)."""
    straight = tmp_path / "straight"
    assert main([*TINY, "--steps", "2", "--output-dir", str(straight)]) == 0
    out = _copy(one_step_run, tmp_path)
    without_limit = ["--env", "toy", "--model", "tiny", "--max-new-tokens", "8", "--threads", "1", "--K", "2",
                     "--G", "2", "--seed", "3"]
    assert main([*without_limit, "--steps", "2", "--output-dir", str(out), "--resume", "--envs", "1",
                 "--save-interval", "1", "--eval-interval", "0", "--prompt-style", "auto"]) == 0
    assert _steps(out) == [1, 2]
    recorded = json.loads((out / "config.json").read_text())
    assert (recorded["max_task_steps"], recorded["prompt_style"], recorded["steps"]) == (2, "compact", 2)
    responses = {name: [(t["trial_id"], t["response"]) for t in _lines(folder / "turns.jsonl")]
                 for name, folder in (("straight", straight), ("resumed", out))}
    assert responses["resumed"] == responses["straight"]


# ------------------------------------------------------------------------ item 13: damaged records, bad folders
@pytest.mark.parametrize("damage", ["not json", "[1, 2]", '{"step": "x", "extra": {"step": "x"}}'])
def test_resume_on_a_damaged_record_line_is_one_line(one_step_run, tmp_path, capsys, damage):
    out = _copy(one_step_run, tmp_path)
    lines = (out / "turns.jsonl").read_text().splitlines(keepends=True)
    lines[1] = damage + "\n"
    (out / "turns.jsonl").write_text("".join(lines))
    capsys.readouterr()
    assert main([*TINY, "--steps", "2", "--output-dir", str(out), "--resume"]) == 2
    err = _one_line_error(capsys)
    assert "turns.jsonl:2" in err and "--overwrite" in err
    assert _steps(out) == [1]


def test_resume_reads_a_record_whose_text_holds_other_line_breaks(one_step_run, tmp_path):
    """Records are written with their text as it is (json_line: no ASCII escapes), so a response may hold
    U+2028 or U+0085; --resume split the files at those too and stopped on a valid file."""
    out = _copy(one_step_run, tmp_path)
    lines = (out / "turns.jsonl").read_text(encoding="utf-8").split("\n")
    turn = json.loads(lines[1])
    turn["response"] += "\u2028and\x85more"
    lines[1] = json.dumps(turn, ensure_ascii=False)
    (out / "turns.jsonl").write_text("\n".join(lines), encoding="utf-8")
    assert main([*TINY, "--steps", "2", "--output-dir", str(out), "--resume"]) == 0
    assert _steps(out) == [1, 2]
    kept = [json.loads(line) for line in (out / "turns.jsonl").read_text(encoding="utf-8").split("\n") if line]
    assert "\u2028and\x85more" in kept[1]["response"]


def test_the_experiment_checks_its_evaluation_and_steps_before_any_warm_start(tmp_path, monkeypatch, capsys,
                                                                              transfer_experiment):
    module = transfer_experiment

    def no_work(*_args, **_kwargs):
        raise AssertionError("the experiment started before checking its settings")

    monkeypatch.setattr(module, "untrained", no_work)
    monkeypatch.setattr(module, "run_seed", no_work)
    for argv, says in ((["--eval-K", "0"], "eval-K"), (["--eval-K", "2", "-1"], "eval-K"),
                       (["--eval-sequences", "0"], "eval-sequences"), (["--steps", "0"], "steps"),
                       (["--repeat-k", "-2"], "repeat-k")):
        with pytest.raises(SystemExit) as exited:
            module.main([*argv, "--work-dir", str(tmp_path / "w"), "--results-dir", str(tmp_path / "r")])
        assert exited.value.code == 2
        assert says in capsys.readouterr().err.replace("_", "-")
    assert not (tmp_path / "w").exists()


def _bad_folders(tmp_path: Path) -> dict[str, Path]:
    (tmp_path / "a-file").write_text("x")
    (tmp_path / "lock-is-a-folder" / ".lock").mkdir(parents=True)
    (tmp_path / "lock-leads-nowhere").mkdir()
    (tmp_path / "lock-leads-nowhere" / ".lock").symlink_to(tmp_path / "no" / "such" / "place")
    return {"a file": tmp_path / "a-file", "under a file": tmp_path / "a-file" / "run",
            "a folder as .lock": tmp_path / "lock-is-a-folder", "a dangling .lock": tmp_path / "lock-leads-nowhere"}


def test_the_trainer_refuses_an_unusable_output_folder_in_one_line(tmp_path, capsys):
    for what, out in _bad_folders(tmp_path).items():
        assert main([*TINY, "--steps", "1", "--output-dir", str(out)]) == 2, what
        err = _one_line_error(capsys)
        assert str(out) in err, err


@pytest.mark.parametrize("carry", [["skill"], ["skill", "none"]], ids=["one-mode", "carry-set"])
def test_the_bench_refuses_an_unusable_output_folder_in_one_line(tmp_path, capsys, carry):
    from skillrise_gym.bench.cli import EXIT_USAGE
    from skillrise_gym.bench.cli import main as bench

    for what, out in _bad_folders(tmp_path).items():
        code = bench(["--env", "toy", "--agent", "random", "--K", "1", "--num-sequences", "2", "--out", str(out),
                      "--env-workers", "0", "--no-progress", "--carry", *carry])
        assert code == EXIT_USAGE, what
        err = _one_line_error(capsys)
        assert str(out) in err, err
