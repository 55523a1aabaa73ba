"""Training on several processes (skillrise_train/distributed.py), as a user launches it on a CPU box:
`accelerate launch --multi_gpu --num_processes 2` (torchrun underneath, gloo).

The policy is a warm-started tiny model and tasks allow 3 solve steps, so trials end at different turns and
the two processes train different numbers of rows (the normal case that crashed TRL's gathers before);
packing is on with a small token budget, so each process would pack a different number of micro-batches.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from skillrise_train.distributed import LockstepGeneration, Ranks, common_packing, shard

ROOT = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------------------------------ units
def test_shard_splits_sequences_whole_and_refuses_fewer_sequences_than_processes():
    assert shard(5, Ranks(0, 2)) == [0, 2, 4] and shard(5, Ranks(1, 2)) == [1, 3]
    assert shard(3, Ranks(0, 1)) == [0, 1, 2]
    with pytest.raises(ValueError, match="at least 3"):
        shard(2, Ranks(1, 3))


def test_common_packing_gives_every_process_the_same_sizes_within_each_budget():
    one = [90, 80, 40, 40, 10, 10]
    assert common_packing([one], 100) == [1, 1, 2, 2]  # plain greedy on one process
    other = [50, 50, 50, 10, 10, 10]
    sizes = common_packing([one, other], 100)
    assert sum(sizes) == 6
    for rows in (one, other):  # no micro-batch exceeds a process's budget
        start = 0
        for size in sizes:
            assert rows[start] * size <= 100 or size == 1
            start += size
    with pytest.raises(ValueError, match="same number of rows"):
        common_packing([one, other[:-1]], 100)


def test_lockstep_generation_on_one_process_is_the_generate_function():
    calls = []
    lockstep = LockstepGeneration(lambda p, x, s: calls.append(p) or list(p), lambda: None, Ranks())
    assert lockstep(["a", "b"], ["", ""], [1, 2]) == ["a", "b"]
    lockstep.finish()  # nobody else to wait for
    assert lockstep.calls == 1 and lockstep.placeholders == 0


def _fake_processes(monkeypatch, rank: int, world: int) -> None:
    import accelerate

    monkeypatch.setattr(accelerate, "PartialState",
                        lambda **kwargs: type("State", (), {"process_index": rank, "num_processes": world})())


def test_settings_several_processes_cannot_run_are_refused_before_the_model_loads(monkeypatch):
    from skillrise_gym.backends import ConfigurationError
    from skillrise_train.cli import start_processes
    from skillrise_train.config import TrainConfig

    _fake_processes(monkeypatch, 1, 3)
    with pytest.raises(ConfigurationError, match="2 sequences per step for 3 processes.*--S to at least 3"):
        start_processes(TrainConfig(env="toy", model="tiny", S=2))
    with pytest.raises(ConfigurationError, match="one Ray instance per process"):
        start_processes(TrainConfig(env="toy", model="tiny", S=3, ray_address="local"))
    assert start_processes(TrainConfig(env="toy", model="tiny", S=3)).rank == 1


def test_an_accelerate_cpu_launch_of_several_processes_is_named(monkeypatch, capsys):
    """`accelerate launch --cpu --num_processes 2` starts one process with the rendezvous settings of two."""
    from skillrise_train.cli import start_processes
    from skillrise_train.config import TrainConfig

    _fake_processes(monkeypatch, 0, 1)
    for name in ("WORLD_SIZE", "LOCAL_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ACCELERATE_USE_CPU", "True")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "29500")
    start_processes(TrainConfig(env="toy", model="tiny"))
    assert "starts ONE process" in capsys.readouterr().err
    monkeypatch.setenv("WORLD_SIZE", "2")  # a real multi-process launch says how many
    start_processes(TrainConfig(env="toy", model="tiny"))
    assert "ONE process" not in capsys.readouterr().err


# ------------------------------------------------------------------------------------------ two processes
def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "OMP_NUM_THREADS": "1", **extra}
    env.pop("SKILLRISE_LOCKSTEP_GENERATION", None)
    env.update(extra)
    return env


def _train(args: list[str], processes: int, env: dict[str, str] | None = None, timeout: int = 600
           ) -> subprocess.CompletedProcess:
    if processes == 1:
        command = [sys.executable, "-m", "skillrise_train.cli", *args]
    else:
        command = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes",
                   str(processes), "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
                   "--main_process_port", str(_free_port()), "-m", "skillrise_train.cli", *args]
    done = subprocess.run(command, cwd=ROOT, env=env or _env(), capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    return done


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def warm_model(tmp_path_factory) -> str:
    """The tiny model after the format warm start: well-formed answers, some tasks solved early, some not."""
    from skillrise_train.config import TrainConfig
    from skillrise_train.trainer import save_warm_started

    out = tmp_path_factory.mktemp("warm") / "model"
    config = TrainConfig(env="rulebook", model="tiny", lora=False, K=2, G=2, S=2, lr=1e-3, max_task_steps=3,
                         max_new_tokens=24, warmstart_steps=150, warmstart_sequences=150,
                         output_dir=str(out) + ".run", threads=1)
    return save_warm_started(config, str(out))


COMMON = ["--env", "rulebook", "--K", "2", "--G", "2", "--S", "4", "--max-task-steps", "3", "--max-new-tokens",
          "24", "--micro-batch-tokens", "400", "--seed", "3", "--threads", "1"]


@pytest.mark.slow
def test_two_processes_train_evaluate_resume_and_their_lora_checkpoint_is_evaluated_by_the_bench(tmp_path, warm_model):
    out = tmp_path / "run"
    # lockstep generation forced (what sharded models use): every process makes the same number of calls
    args = [*COMMON, "--model", warm_model, "--lora", "--lr", "1e-3", "--steps", "2", "--eval-sequences", "2",
            "--eval-interval", "1", "--output-dir", str(out)]
    done = _train(args, 2, _env(SKILLRISE_LOCKSTEP_GENERATION="1"))
    console = done.stdout
    assert "processes=2" in console
    assert sum(line.strip().startswith("1 |") for line in console.splitlines()) == 1  # each row printed once
    assert console.count("eval step 1 ") == 1

    turns = _lines(out / "turns.jsonl")
    trials = {t["trial_id"] for t in turns}
    # every trial of both processes, each once: S x G per step, sequences 0-3 (two on each process)
    assert trials == {f"step{k}/s{s}/g{g}" for k in range(2) for s in range(4) for g in range(2)}
    keys = [(t["trial_id"], t["position"], t["role"], t["step_index"]) for t in turns]
    assert len(keys) == len(set(keys))

    metrics = _lines(out / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [1, 2]
    for m in metrics:  # statistics of the global batch: the turns of both processes
        step_turns = [t for t in turns if t["extra"]["step"] == m["step"] - 1]
        assert m["turns/solve"] == sum(t["role"] == "solve" for t in step_turns)
        assert m["generation/calls_per_process_min"] == m["generation/calls_per_process_max"] > 0
    # the case that crashed: the processes trained different numbers of rows
    assert any(m["rows/per_process_min"] != m["rows/per_process_max"] for m in metrics), metrics

    assert [e["step"] for e in _lines(out / "eval.jsonl")] == [1, 2]
    assert (out / "eval" / "step-1" / "summary.json").exists()
    for step in (1, 2):
        assert (out / f"checkpoint-{step}" / "skillrise-complete.json").exists()
    adapter = json.loads((out / "final" / "adapter_config.json").read_text())
    assert adapter["base_model_name_or_path"] == warm_model  # the name it was given, not a cache path

    # --resume on two processes: one more step, each step's records once
    _train([*args[:-4], "--steps", "3", "--eval-sequences", "0", "--output-dir", str(out), "--resume"], 2)
    assert [m["step"] for m in _lines(out / "metrics.jsonl")] == [1, 2, 3]
    turns = _lines(out / "turns.jsonl")
    assert sorted({t["extra"]["step"] for t in turns}) == [0, 1, 2]
    assert len({t["trial_id"] for t in turns}) == 3 * 8

    # the LoRA checkpoint, evaluated by the bench's hf agent
    bench = subprocess.run(
        [sys.executable, "-m", "skillrise_gym.bench.cli", "--env", "rulebook", "--agent", "hf", "--model",
         str(out / "final"), "--K", "2", "--num-sequences", "2", "--max-task-steps", "3", "--out", str(tmp_path / "bench")],
        cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=600)
    assert bench.returncode == 0, bench.stderr[-3000:]
    summary = json.loads((tmp_path / "bench" / "summary.json").read_text())
    assert summary["agent"]["adapter"] is True


@pytest.mark.slow
def test_one_step_on_two_processes_updates_the_weights_as_one_process_does(tmp_path, warm_model):
    """dapo (the default) normalises by the global token count, so the averaged gradients of two processes
    equal one process's on the same trials; the entropy bonus is a global token mean too."""
    from safetensors.torch import load_file

    args = [*COMMON, "--model", warm_model, "--no-lora", "--lr", "1e-3", "--steps", "1", "--entropy-coef", "0.01"]
    _train([*args, "--output-dir", str(tmp_path / "two")], 2)
    _train([*args, "--output-dir", str(tmp_path / "one")], 1)

    def responses(run: str) -> dict:
        return {(t["trial_id"], t["step_index"], t["role"], t["position"]): t["response"]
                for t in _lines(tmp_path / run / "turns.jsonl")}

    assert responses("two") == responses("one")  # the same trials, sampled with the same per-turn seeds
    metrics = _lines(tmp_path / "two" / "metrics.jsonl")[0]
    assert metrics["rows/per_process_min"] != metrics["rows/per_process_max"]
    two = load_file(tmp_path / "two" / "final" / "model.safetensors")
    one = load_file(tmp_path / "one" / "final" / "model.safetensors")
    start = load_file(Path(warm_model) / "model.safetensors")
    moved = max(float((one[k] - start[k]).abs().max()) for k in one)
    assert moved > 1e-4  # the step changed the weights
    # rounding level: the processes' micro-batches differ from the one process's (padding, shared prefixes,
    # attention blocks), so sums run in other orders, and Adam's first step (about lr x sign(g)) turns a
    # rounding difference in a gradient near 0 into up to a few hundredths of a step (lr 1e-3 here)
    for name in one:
        assert (two[name] - one[name]).abs().max() <= 5e-5 * max(1.0, moved * 100), name
