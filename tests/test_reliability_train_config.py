"""Reliability of `skillrise-train`, round three (issue 46, items 7, 10, 11 and 14): settings refused when the
config is made (a misspelt split, out-of-range numbers), `final/` saved before the last evaluation, bad
`--trl-options` refused before the output folder is touched and secrets kept out of config.json, torch's
full-disk errors recognised (exit 5), and the other processes waiting out a long evaluation."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl")

from skillrise_train.cli import EXIT_OUTPUT, main, output_failure, parse_config  # noqa: E402

TINY = ["--env", "toy", "--model", "tiny", "--max-new-tokens", "8", "--threads", "1", "--K", "2", "--G", "2",
        "--max-task-steps", "2", "--seed", "3"]
ROOT = Path(__file__).resolve().parents[1]


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("skillrise-train: error: "), err[-3000:]
    return lines[0]


# ------------------------------------------------------------------------ item 7: refused when the config is made
@pytest.mark.parametrize("flags", [["--eval-split", "nosuch", "--eval-sequences", "1"], ["--eval-split", "tset"],
                                   ["--train-split", "nosuch"]])
def test_a_misspelt_split_is_one_line_exit_2_before_the_model_loads(tmp_path, monkeypatch, capsys, flags):
    """--eval-split nosuch was found after the first training step (a traceback, no final/); --train-split
    nosuch after the model loaded. Both are now refused by the config, naming the known splits."""
    from skillrise_gym import models

    def no_model(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(models, "resolve_model_path", no_model)
    with pytest.raises(ValueError, match=f"unknown split '{flags[1]}' for toy; known splits: train, test"):
        parse_config([*TINY, *flags])
    out = tmp_path / "run"
    assert main([*TINY, "--steps", "1", *flags, "--output-dir", str(out)]) == 2
    assert "known splits: train, test" in _one_line(capsys.readouterr().err)
    assert not out.exists()


@pytest.mark.parametrize("flag, value", [
    ("--seed", "-1"), ("--seed", str(2**32)), ("--eval-sequences", "-1"), ("--eval-interval", "-2"),
    ("--save-interval", "0"), ("--lora-r", "0"), ("--lora-alpha", "0"), ("--lora-alpha", "-3"),
    ("--temperature", "-1"), ("--temperature", "nan"), ("--temperature", "inf"), ("--max-prompt-tokens", "-5"),
    ("--warmstart-steps", "-1"), ("--warmstart-sequences", "-1"), ("--weight-decay", "-1"),
    ("--weight-decay", "nan"), ("--max-grad-norm", "-1"), ("--max-grad-norm", "nan"), ("--epsilon", "0"),
    ("--epsilon", "nan"), ("--dual-clip", "-1"), ("--dual-clip", "0.5"), ("--dual-clip", "nan"),
    ("--entropy-coef", "nan"), ("--success-reward", "nan"), ("--success-reward", "0"),
    ("--micro-batch-tokens", "-2"), ("--env-workers", "-1"), ("--vllm-gpu-memory-utilization", "0"),
    ("--vllm-gpu-memory-utilization", "1.5"), ("--loss-type", "nosuch"), ("--output-dir", ""),
])
def test_out_of_range_values_are_one_line_errors(tmp_path, capsys, flag, value):
    """Each of these passed the flag checks and then crashed (--seed -1: numpy's "Seed must be between 0 and
    2**32 - 1" traceback), or ran a meaningless run (--save-interval 0, --temperature nan, ...)."""
    name = flag[2:].replace("-", "_")
    with pytest.raises(ValueError, match=name):
        parse_config([*TINY, flag, value])
    args = [*TINY, "--steps", "1", "--output-dir", str(tmp_path / "run"), flag, value]
    assert main(args) == 2
    assert name in _one_line(capsys.readouterr().err)
    assert not (tmp_path / "run").exists()


def test_warmstart_steps_without_sequences_to_learn_from_are_refused():
    with pytest.raises(ValueError, match="warmstart_sequences"):
        parse_config([*TINY, "--warmstart-steps", "3", "--warmstart-sequences", "0"])
    parse_config([*TINY, "--warmstart-steps", "0", "--warmstart-sequences", "0"])  # no warm start: nothing needed


def test_the_boundaries_themselves_are_accepted():
    config = parse_config([*TINY, "--seed", "0", "--eval-sequences", "0", "--eval-interval", "0", "--save-interval",
                           "1", "--temperature", "0", "--max-prompt-tokens", "0", "--dual-clip", "0",
                           "--micro-batch-tokens", "-1", "--vllm-gpu-memory-utilization", "1"])
    assert config.temperature == 0 and config.dual_clip == 0
    assert parse_config([*TINY, "--seed", str(2**31 - 1)]).seed == 2**31 - 1


class _EvaluationFailed(Exception):
    """Stands for anything an evaluation may die of (an engine crash, a lost worker)."""


@pytest.mark.parametrize("interval", ["0", "1"])
def test_final_is_saved_before_the_last_evaluation_and_kept_when_it_fails(tmp_path, monkeypatch, interval):
    """The last evaluation ran before final/ was saved, so a failing evaluation lost the trained model. final/
    (the trained adapter, docs/train.md) is now saved first; the evaluation's failure still ends the run."""
    from skillrise_train import evaluate

    calls = []
    real = evaluate.evaluate

    def failing(config, episode, generate, step, split, out):
        calls.append(step)
        if step < config.steps:  # --eval-interval 1: the evaluation of step 1 succeeds
            return real(config, episode, generate, step, split, out)
        assert (Path(out) / "final" / "adapter_model.safetensors").is_file()  # saved before evaluating
        assert (Path(out) / "final" / "episode.json").is_file()
        raise _EvaluationFailed(f"evaluation of step {step} failed")

    monkeypatch.setattr(evaluate, "evaluate", failing)
    out = tmp_path / "run"
    with pytest.raises(_EvaluationFailed):
        main([*TINY, "--steps", "2", "--eval-sequences", "1", "--eval-interval", interval, "--output-dir", str(out)])
    assert calls == ([1, 2] if interval == "1" else [2])
    assert (out / "final" / "adapter_model.safetensors").is_file()


def test_evaluations_during_training_still_run_at_their_interval(tmp_path, monkeypatch):
    """Moving the last evaluation after the save must not drop or repeat any evaluation."""
    from skillrise_train import evaluate

    seen = []
    real = evaluate.evaluate

    def spy(config, episode, generate, step, split, out):
        seen.append((step, (Path(out) / "final").is_dir()))
        return real(config, episode, generate, step, split, out)

    monkeypatch.setattr(evaluate, "evaluate", spy)
    out = tmp_path / "run"
    assert main([*TINY, "--steps", "3", "--eval-sequences", "1", "--eval-interval", "2", "--output-dir", str(out)]) == 0
    assert seen == [(2, False), (3, True)]
    assert [e["step"] for e in _lines(out / "eval.jsonl")] == [2, 3]
    seen.clear()
    out = tmp_path / "every"
    assert main([*TINY, "--steps", "2", "--eval-sequences", "1", "--eval-interval", "1", "--output-dir", str(out)]) == 0
    assert seen == [(1, False), (2, True)]
    assert [e["step"] for e in _lines(out / "eval.jsonl")] == [1, 2]


# ------------------------------------------------------------------------ item 10: trl_options
def _installed(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


BAD_TRL_OPTIONS = [
    ({"lr_scheduler_type": "cosine", "lr_scheduler_kwargs": {"foo": 1}}, "foo"),
    ({"lr_scheduler_type": "cosine", "lr_scheduler_kwargs": [1]}, "lr_scheduler_kwargs"),
    ({"lr_scheduler_type": "cosine", "lr_scheduler_kwargs": "abc"}, "lr_scheduler_kwargs"),
    ({"lr_scheduler_kwargs": {"num_cycles": 2}}, "lr_scheduler_kwargs"),  # the constant scheduler ignores them
    ({"optim": "nosuch"}, "optim"),
    ({"adam_beta1": 2}, "beta"),
    ({"adam_epsilon": -1}, "epsilon"),
    ({"warmup_steps": -3}, "warmup_steps"),
    ({"epsilon_high": "x"}, "epsilon_high"),
    ({"mask_truncated_completions": "yes"}, "mask_truncated_completions"),
    ({"gradient_checkpointing_kwargs": [1]}, "gradient_checkpointing_kwargs"),
    ({"model_init_kwargs": [1]}, "model_init_kwargs"),
    ({"ddp_timeout": "x"}, "ddp_timeout"),
    pytest.param({"optim": "adamw_bnb_8bit"}, "bitsandbytes",
                 marks=pytest.mark.skipif(_installed("bitsandbytes"), reason="bitsandbytes is installed")),
    pytest.param({"optim": "galore_adamw"}, "galore",
                 marks=pytest.mark.skipif(_installed("galore_torch"), reason="galore_torch is installed")),
    pytest.param({"use_liger_kernel": True}, "liger",
                 marks=pytest.mark.skipif(_installed("liger_kernel"), reason="liger_kernel is installed")),
]


def _no_gpu() -> bool:
    import torch

    return not torch.cuda.is_available()


@pytest.mark.parametrize("options, says", BAD_TRL_OPTIONS + [
    pytest.param({"deepspeed": {"zero_optimization": {"stage": 2}}}, "deepspeed",
                 marks=pytest.mark.skipif(not _no_gpu(), reason="a GPU is here")),
    pytest.param({"fsdp": "full_shard"}, "fsdp", marks=pytest.mark.skipif(not _no_gpu(), reason="a GPU is here")),
])
def test_trl_options_that_crash_after_setup_are_one_line_exit_2_before_the_folder_is_touched(tmp_path, capsys,
                                                                                            options, says):
    """Each of these passed --trl-options' check and then crashed after config.json was written (a
    traceback, exit 1: a scheduler's unknown keyword, an optimizer package missing, Adam's beta, DeepSpeed
    on a CPU, ...) or was one line only after the folder was written (an unknown optim)."""
    out = tmp_path / "run"
    assert main([*TINY, "--steps", "1", "--trl-options", json.dumps(options), "--output-dir", str(out)]) == 2
    line = _one_line(capsys.readouterr().err)
    assert says in line and "trl_options" in line
    assert not out.exists()


def test_good_trl_options_still_train(tmp_path):
    """The up-front check must not refuse what trains: a cosine schedule with its own keyword, another optimizer."""
    options = {"lr_scheduler_type": "cosine", "lr_scheduler_kwargs": {"num_cycles": 0.5}, "warmup_steps": 1,
               "optim": "adamw_torch", "adam_beta2": 0.99, "optim_args": "", "epsilon_high": 0.3}
    out = tmp_path / "run"
    assert main([*TINY, "--steps", "1", "--trl-options", json.dumps(options), "--output-dir", str(out)]) == 0
    assert json.loads((out / "config.json").read_text())["trl_options"] == options


def test_hub_token_and_other_secrets_are_never_written_to_config_json(tmp_path, monkeypatch):
    """hub_token was written in plain text to config.json; now redacted there (every write), still given to TRL."""
    import skillrise_gym.paths
    from skillrise_train.config import TrainConfig
    from skillrise_train.grpo_args import make_grpo_config

    secret = "hf_secretvalue123"
    options = {"hub_token": secret, "lr_scheduler_type": "cosine"}
    written: list[str] = []
    real = skillrise_gym.paths.atomic_write

    def spy(path, text, *args, **kwargs):
        if Path(path).name == "config.json":
            written.append(text if isinstance(text, str) else text.decode())
        return real(path, text, *args, **kwargs)

    monkeypatch.setattr(skillrise_gym.paths, "atomic_write", spy)
    out = tmp_path / "run"
    assert main([*TINY, "--steps", "1", "--trl-options", json.dumps(options), "--output-dir", str(out)]) == 0
    assert written and (out / "config.json").read_text() == written[-1]
    assert len(written) >= 2  # the folder's first config.json and the resolved one
    for text in written:
        assert secret not in text
    assert json.loads(written[-1])["trl_options"] == {"hub_token": "<redacted>", "lr_scheduler_type": "cosine"}
    for path in out.rglob("*"):
        if path.is_file() and path.suffix in (".json", ".jsonl", ".md", ".txt"):
            assert secret not in path.read_text(errors="replace"), path
    # TRL still gets it
    assert make_grpo_config(TrainConfig(env="toy", model="tiny", trl_options=options)).hub_token == secret


def test_secrets_are_redacted_at_any_depth_and_nothing_else_is():
    from skillrise_train.config import REDACTED, redact_secrets

    options = {"hub_token": "hf_x", "generation_kwargs": {"api_key": "sk-1", "min_new_tokens": 2},
               "accelerator_config": {"nested": [{"password": "p", "split_batches": False}]},
               "include_num_input_tokens_seen": "all", "average_tokens_across_devices": True, "hub_model_id": None}
    assert redact_secrets(options) == {
        "hub_token": REDACTED, "generation_kwargs": {"api_key": REDACTED, "min_new_tokens": 2},
        "accelerator_config": {"nested": [{"password": REDACTED, "split_batches": False}]},
        "include_num_input_tokens_seen": "all", "average_tokens_across_devices": True, "hub_model_id": None}


# ------------------------------------------------------------------------ item 11: torch's full-disk errors
def test_torchs_write_errors_count_as_a_full_disk(tmp_path):
    import errno

    out = tmp_path / "run"
    iostream = RuntimeError("basic_ios::clear: iostream error")
    pos = RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 64 vs 0")
    pos.__context__ = iostream
    for exc in (iostream, pos):
        failure = output_failure(exc, out)
        assert failure is not None and failure.errno == errno.ENOSPC
    assert output_failure(RuntimeError("unexpected position in the prompt"), out) is None


def test_a_full_disk_while_the_optimizer_is_saved_is_one_line_exit_5_and_resumable(tmp_path, monkeypatch, capsys):
    """The folder filling up while torch writes optimizer.pt surfaced as two tracebacks ("basic_ios::clear:
    iostream error", "unexpected pos 64 vs 0"), exit 1. Here the write really fails: it goes to /dev/full."""
    import torch

    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    straight, out = tmp_path / "straight", tmp_path / "run"
    assert main([*TINY, "--steps", "2", "--output-dir", str(straight)]) == 0
    real = torch.save

    def save(obj, f, *args, **kwargs):
        if isinstance(f, (str, os.PathLike)) and Path(f).name == "optimizer.pt" and "checkpoint-2" in str(f):
            f = "/dev/full"
        return real(obj, f, *args, **kwargs)

    monkeypatch.setattr(torch, "save", save)
    capsys.readouterr()
    assert main([*TINY, "--steps", "2", "--output-dir", str(out)]) == EXIT_OUTPUT
    line = _one_line(capsys.readouterr().err)
    assert "No space left on device" in line and "--resume" in line and str(out) in line
    from skillrise_train.checkpoints import latest_complete

    assert latest_complete(out)[0].name == "checkpoint-1"  # the complete checkpoint is intact
    monkeypatch.setattr(torch, "save", real)
    assert main([*TINY, "--steps", "2", "--output-dir", str(out), "--resume"]) == 0
    assert [m["step"] for m in _lines(out / "metrics.jsonl")] == [1, 2]
    turns = lambda folder: sorted((t["trial_id"], t["step_index"], t["role"], t["response"])  # noqa: E731
                                  for t in _lines(folder / "turns.jsonl"))
    assert turns(out) == turns(straight)  # each step recorded once, as an uninterrupted run records it


# ------------------------------------------------------------------------ item 14: a long evaluation on two processes
RUNNER = """
import sys, time
from datetime import timedelta

import torch.distributed.distributed_c10d as c10d

c10d.default_pg_timeout = timedelta(seconds={timeout})  # the process group's timeout, shortened from 30 min

import skillrise_train.evaluate as evaluation

real = evaluation.evaluate


def slow(*args, **kwargs):  # an evaluation longer than the process group's timeout
    time.sleep({sleep})
    return real(*args, **kwargs)


evaluation.evaluate = slow
from skillrise_train.cli import main

sys.exit(main(sys.argv[1:]))
"""


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow
def test_the_other_processes_wait_out_an_evaluation_longer_than_the_process_groups_timeout(tmp_path, tiny_model_dir):
    """While the main process evaluates, the others waited in a barrier under the process group's timeout (30
    minutes by default), so an evaluation longer than that killed the run. Here the timeout is 10 s and the
    evaluation 25 s: the run ends normally, with its evaluation, on two processes (gloo)."""
    runner = tmp_path / "runner.py"
    runner.write_text(RUNNER.format(timeout=10, sleep=25))
    out = tmp_path / "run"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    env.pop("SKILLRISE_LOCKSTEP_GENERATION", None)
    command = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
               "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port",
               str(_free_port()), str(runner), *TINY, "--model", tiny_model_dir, "--S", "2", "--steps", "1",
               "--eval-sequences", "1", "--output-dir", str(out)]  # (a built model: two processes share no cache)
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    assert "processes=2" in done.stdout
    assert [e["step"] for e in _lines(out / "eval.jsonl")] == [1]
    assert (out / "final" / "adapter_model.safetensors").is_file()


def test_the_loss_types_are_the_pinned_trls():
    """`config.LOSS_TYPES` (checked when the config is made) names every loss TRL's GRPOConfig documents."""
    import dataclasses
    import re

    from skillrise_train.config import LOSS_TYPES
    from skillrise_train.trl_adapter import GRPOConfig

    (field,) = [f for f in dataclasses.fields(GRPOConfig) if f.name == "loss_type"]
    listed = field.metadata["help"].split("Supported values are")[1].split(". ")[0]
    assert sorted(re.findall(r"'(\w+)'", listed)) == sorted(LOSS_TYPES)
