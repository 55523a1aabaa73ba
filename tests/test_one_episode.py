"""One episode everywhere: what a policy is trained on is what it is evaluated and benchmarked on.

- For every algorithm and every benchmark, a training rollout (`RolloutEngine` playing the training episode)
  and the trainer's evaluation (`evaluate.evaluate`, a bench run) of the same policy on the same sequences
  see byte-identical prompts.
- `EpisodeSpec` files: saved and read back, refused with the file's name when damaged or newer.
- The trainer saves its episode with every checkpoint and final/, config.json holds no "auto", and
  `skillrise-bench --agent hf --model RUN/final` plays it without a style flag (and says when a flag changes it).
"""

from __future__ import annotations

import json
import zlib
from pathlib import Path
from typing import Any

import pytest

from skillrise_gym import episode as episodes
from skillrise_gym.episode import EpisodeFileError, EpisodeSpec

#: backend -> (a held-out split small enough here, backend options): the test data of every registered id
ENVS = {
    "rulebook": ("test", lambda: {"rules": 2, "bins": 4}),
    "webshop": ("test", dict),
    "alfworld": ("eval_in_distribution", lambda: {"data_dir": str(_alfworld_data())}),
    "scienceworld": ("test", lambda: {"tasks": ["lifespan-shortest-lived", "lifespan-longest-lived"]}),
}
ALGOS = ("skillrise", "grpo", "gigpo", "lamer")


def _alfworld_data() -> Path:
    from conftest import alfworld_data, need_data

    return need_data(alfworld_data(), "ALFWorld game files")


class Completion:
    """What the trainer's generate returns for one prompt (the fields the rollout and evaluation read)."""

    def __init__(self, text: str) -> None:
        self.text, self.prompt_ids, self.completion_ids = text, [1, 2], [3]
        self.prompt_truncated, self.sampler_logps, self.cut = False, None, False


def scripted_generate(prompts: list[str], prefixes: list[str], seeds: list[int] | None = None) -> list[Completion]:
    """A deterministic policy: its answer depends on the prompt alone (prefix + an action, a skill and a remark,
    so every role reads a well-formed answer), so equal prompts give equal trajectories."""
    out = []
    for prompt, prefix in zip(prompts, prefixes):
        h = zlib.crc32(prompt.encode()) % 4
        look = ["look", "inventory", "search[red shoes]", "click[back to search]"][h]
        out.append(Completion(f"{prefix}{look}</action> <skill>rule {h}: check first</skill> "
                              f"<remark>try {h}</remark>"))
    return out


def _prompts_by_sequence(turns: list[Any]) -> dict[str, list[tuple[int, str, str]]]:
    """{sequence id: [(position, role, prompt), ...]} in play order."""
    by: dict[str, list[tuple[int, str, str]]] = {}
    for t in turns:
        by.setdefault(t.sequence_id, []).append((t.position, t.role, t.prompt))
    return by


@pytest.mark.parametrize("algo", ALGOS)
@pytest.mark.parametrize("env", [pytest.param(e, marks=() if e in ("rulebook", "webshop") else pytest.mark.slow)
                                 for e in ENVS])
def test_training_and_its_evaluation_see_byte_identical_prompts(env, algo, tmp_path):
    from skillrise_gym.bench.store import carry_run_dir
    from skillrise_gym.records import read_turns
    from skillrise_train.config import TrainConfig
    from skillrise_train.evaluate import evaluate, evaluation_episode
    from skillrise_train.rollout import EVAL_SEED_OFFSET, RolloutEngine
    from skillrise_train.rollout_setup import RolloutConfig, training_episode

    split, options = ENVS[env]
    if algo == "lamer":
        from skillrise_gym import prompts
        from skillrise_gym.backends import backend_class

        if not prompts.profile(backend_class(env).benchmark).reflect:
            pytest.skip(f"{env} has no reflect prompt")
    n = 2
    config = TrainConfig(env=env, algo=algo, model="tiny", K=2, G=2, S=n, max_task_steps=2, seed=3,
                         backend_options=options(), eval_sequences=n, generation_batch=8, output_dir=str(tmp_path))
    trained = training_episode(config, "compact", max_new_tokens=48, max_prompt_tokens=512)
    # the training episode, on the held-out split: the sequences the evaluation draws (its seed's)
    engine = RolloutEngine(RolloutConfig.from_train(config, trained.replace(split=split)))
    try:
        plans = [p for p in engine.plan(engine.sequences(0, n, EVAL_SEED_OFFSET), "step0") if p.trial_id.endswith("g0")]
        result = engine.play(plans, scripted_generate)
    finally:
        engine.close()
    evaluate(config, trained, scripted_generate, 0, split, tmp_path)
    run = carry_run_dir(tmp_path / "eval" / "step-0", trained.carry)  # carry-reflect/ for LaMer
    evaluated = read_turns(run / "turns.jsonl")
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["identity"]["prompt_style"] == "compact"
    assert manifest["identity"]["agent"]["framing"] == trained.framing()

    train_prompts = _prompts_by_sequence([s.turn for s in result.samples])
    eval_prompts = _prompts_by_sequence(evaluated)
    assert set(train_prompts) == set(eval_prompts) and len(eval_prompts) == n
    if engine.algorithm.whole_sequences:  # every turn of the episode: the same prompts, in the same order
        assert train_prompts == eval_prompts
    else:
        # one-task episodes (GRPO, GiGPO): each task of a sequence is trained alone, with no document; the
        # evaluation plays the K-task sequence, whose first task is exactly such an episode (the later tasks
        # show the documents this policy writes: what the evaluation measures)
        for sequence, turns in eval_prompts.items():
            first = [t for t in turns if t[0] == 0 and t[1] == "solve"]
            assert [t for t in train_prompts[sequence] if t[0] == 0] == first
    assert evaluation_episode(trained, split, config.K).replace(K=trained.K, split=trained.split) == trained


def test_a_spec_resolves_every_default_and_round_trips_through_its_file(tmp_path):
    spec = EpisodeSpec.resolve("webshop", 2, prompt_style=None, max_new_tokens=48)
    assert spec.split == "test" and spec.prompt_style == "full" and spec.max_task_steps == 15  # WebShop's first split
    assert spec.env_kwargs()["admissible_actions"] is True
    spec.save(tmp_path, algo="skillrise", held_out_split="test")
    saved = episodes.load(tmp_path)
    assert saved.spec == spec and saved.notes == {"algo": "skillrise", "held_out_split": "test"}
    assert episodes.load(tmp_path / "nothing-here") is None
    assert spec.differences(spec.replace(prompt_style="compact", K=4)) == {"prompt_style": ("full", "compact")}


def test_a_saved_held_out_split_is_read_by_its_name_here(tmp_path):
    """ALFWorld's own name for a held-out split (valid_seen) is the split it names here, both for the split
    played without --split and for the console's label of the split played; one this version does not know is
    refused when it would be played and kept as written when it only labels."""
    from skillrise_gym.bench.cli import held_out_split

    spec = EpisodeSpec.resolve("alfworld", 2, prompt_style=None, max_new_tokens=48)
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    spec.save(tmp_path / "a", held_out_split="valid_seen")
    assert held_out_split(episodes.load(tmp_path / "a")) == "eval_in_distribution"
    spec.save(tmp_path / "b", held_out_split="valid_nosuch")
    with pytest.raises(ValueError, match="'valid_nosuch'.*give --split"):
        held_out_split(episodes.load(tmp_path / "b"))
    assert held_out_split(episodes.load(tmp_path / "b"), strict=False) == "valid_nosuch"


@pytest.mark.parametrize("payload, message", [
    ({"version": 1, "episode": {"env": "toy", "split": "train", "K": 2, "max_task_steps": 2, "colour": "red"}},
     "unknown episode field(s) colour"),
    ({"version": 9, "episode": {}}, "version 9"),
    ({"version": 1, "episode": {"env": "toy", "split": "nosuch", "K": 2, "max_task_steps": 2}}, "unknown split"),
    ({"version": 1}, "not an episode file"),
    ("{not json", "cannot read it as JSON"),
])
def test_a_damaged_or_newer_episode_file_is_refused_naming_it(tmp_path, payload, message):
    path = tmp_path / episodes.FILE
    path.write_text(payload if isinstance(payload, str) else json.dumps(payload))
    with pytest.raises(EpisodeFileError) as caught:
        episodes.load(tmp_path)
    assert str(path) in str(caught.value) and message in str(caught.value)


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    """A tiny model trained one step on the probe (compact prompts: auto, under 1B parameters), evaluated."""
    from skillrise_train.cli import main

    out = tmp_path_factory.mktemp("run") / "run"
    code = main(["--env", "rulebook", "--model", "tiny", "--K", "2", "--G", "2", "--steps", "1", "--max-task-steps",
                 "1", "--eval-sequences", "2", "--max-new-tokens", "24", "--save-merged", "--output-dir", str(out)])
    assert code == 0
    return out


def test_the_trainer_saves_its_episode_with_every_checkpoint_and_records_resolved_values(trained_run):
    config = json.loads((trained_run / "config.json").read_text())
    assert "auto" not in json.dumps(config)
    assert config["prompt_style"] == "compact" and config["max_task_steps"] == 1
    final = episodes.load(trained_run / "final")
    checkpoint = episodes.load(trained_run / "checkpoint-1")
    merged = episodes.load(trained_run / "final-merged")
    assert final.spec == checkpoint.spec == merged.spec == EpisodeSpec.from_dict(config["episode"])
    assert final.spec.prompt_style == "compact" and final.spec.max_new_tokens == 24 and final.spec.K == 2
    assert final.notes["held_out_split"] == "test" and final.notes["algo"] == "skillrise"
    assert final.notes["template_system_prompt"] is None  # the tiny model's template adds none
    # the in-training evaluation played it (on the held-out split)
    identity = json.loads((trained_run / "eval" / "step-1" / "manifest.json").read_text())["identity"]
    assert identity["prompt_style"] == "compact" and identity["split"] == "test"


def _bench(trained_run: Path, out: Path, *flags: str) -> int:
    from skillrise_gym.bench.cli import main
    from skillrise_train.rollout import EVAL_SEED_OFFSET

    return main(["--env", "rulebook", "--agent", "hf", "--model", str(trained_run / "final"), "--K", "2",
                 "--num-sequences", "2", "--split", "test", "--seed", str(EVAL_SEED_OFFSET), "--env-workers", "0",
                 "--no-progress", "--no-plots", "--out", str(out), *flags])


def test_the_bench_plays_a_trained_policys_episode_without_a_style_flag(trained_run, tmp_path, capsys):
    from skillrise_gym.records import read_turns

    assert _bench(trained_run, tmp_path / "b") == 0
    err = capsys.readouterr().err
    assert "playing the episode" in err and "trained on split train at K=2" in err
    assert "sampled at temperature 1 in training, 0 here (--temperature)" in err
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())["identity"]
    assert manifest["prompt_style"] == "compact" and manifest["agent"]["max_new_tokens"] == 24
    assert manifest["episode_from"]["differs"] == {}
    # the first prompt of each sequence is the one the in-training evaluation (same split and seed) saw
    bench = {t.sequence_id: t.prompt for t in reversed(read_turns(tmp_path / "b" / "turns.jsonl"))}
    evaluated = {t.sequence_id: t.prompt for t in reversed(read_turns(trained_run / "eval" / "step-1" / "turns.jsonl"))}
    assert bench == evaluated


def test_without_split_a_trained_policy_is_scored_on_its_held_out_split_not_its_training_tasks(trained_run, tmp_path,
                                                                                                capsys):
    """The probe's bench default is its first split, train: the very tasks the policy trained on. A model
    folder's episode names the held-out split its training evaluated on, and that is what the bench plays
    unless --split says otherwise; --split train is played as asked, and said to be the training tasks."""
    from skillrise_gym.bench.cli import main

    common = ["--agent", "hf", "--model", str(trained_run / "final"), "--K", "2", "--num-sequences", "1",
              "--env-workers", "0", "--no-progress", "--no-plots"]
    assert main([*common, "--out", str(tmp_path / "default")]) == 0  # no --env: the episode's benchmark
    assert "measured on split test at K=2 (the held-out split its training evaluated on)" in capsys.readouterr().err
    identity = json.loads((tmp_path / "default" / "manifest.json").read_text())["identity"]
    assert identity["env"] == "rulebook" and identity["split"] == "test"
    assert main([*common, "--env", "rulebook", "--split", "train", "--out", str(tmp_path / "train")]) == 0
    assert ("measured on split train at K=2 (the tasks it was trained on; its held-out split is test)"
            in capsys.readouterr().err)
    assert json.loads((tmp_path / "train" / "manifest.json").read_text())["identity"]["split"] == "train"


def test_another_benchmark_than_the_episodes_is_refused_unless_the_episode_is_set_aside(trained_run, tmp_path,
                                                                                       capsys):
    """--env toy with a policy trained on the probe would play toy with the probe's engine options, step limit
    and prompts: refused, naming the file and both ways out. --episode none plays the bench's own defaults,
    says so, and the manifest records the episode set aside."""
    from skillrise_gym.bench.cli import main

    common = ["--agent", "hf", "--model", str(trained_run / "final"), "--K", "1", "--num-sequences", "1",
              "--env-workers", "0", "--no-progress", "--no-plots", "--max-new-tokens", "8"]
    assert main(["--env", "toy", *common, "--out", str(tmp_path / "refused")]) == 2
    err = capsys.readouterr().err
    assert str(trained_run / "final" / "episode.json") in err and "an episode of rulebook" in err
    assert "drop --env" in err and "--episode none" in err and not (tmp_path / "refused").exists()
    assert main(["--env", "toy", *common, "--episode", "none", "--out", str(tmp_path / "toy")]) == 0
    err = capsys.readouterr().err
    assert "--episode none: playing toy with the bench's defaults" in err and "playing the episode" not in err
    identity = json.loads((tmp_path / "toy" / "manifest.json").read_text())["identity"]
    assert identity["env"] == "toy" and identity["episode_from"] == {
        "from": None, "ignored": str(trained_run / "final" / "episode.json")}
    with pytest.raises(SystemExit) as exited:  # neither --env nor an episode: the benchmark is not known
        main(["--agent", "expert", "--out", str(tmp_path / "none")])
    assert exited.value.code == 2 and "required: --env" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:  # a mistyped model folder: said, not just "--env"
        main(["--agent", "hf", "--model", str(tmp_path / "nosuch" / "final"), "--out", str(tmp_path / "none")])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and f"{tmp_path / 'nosuch' / 'final'} is not a folder holding" in err


def test_a_flag_that_changes_the_trained_episode_is_stated_once_and_recorded(trained_run, tmp_path, capsys):
    assert _bench(trained_run, tmp_path / "b", "--prompt-style", "full", "--max-new-tokens", "64") == 0
    err = capsys.readouterr().err
    assert err.count("differs from the episode") == 1
    assert "prompt_style 'full' (trained 'compact')" in err and "max_new_tokens 64 (trained 24)" in err
    differs = json.loads((tmp_path / "b" / "manifest.json").read_text())["identity"]["episode_from"]["differs"]
    assert differs == {"prompt_style": ["compact", "full"], "max_new_tokens": [24, 64]}


def test_a_model_folder_without_an_episode_says_the_defaults_are_played(trained_run, tmp_path, capsys):
    import shutil

    from skillrise_gym.bench.cli import main

    old = tmp_path / "old-run"
    shutil.copytree(trained_run, old, ignore=shutil.ignore_patterns("episode.json"))
    config = json.loads((old / "config.json").read_text())
    config["prompt_style"] = "auto"  # what runs before episodes recorded
    (old / "config.json").write_text(json.dumps(config))
    code = main(["--env", "rulebook", "--agent", "hf", "--model", str(old / "final"), "--K", "1", "--num-sequences",
                 "1", "--env-workers", "0", "--no-progress", "--no-plots", "--max-new-tokens", "8", "--out", str(tmp_path / "b")])
    assert code == 0
    err = capsys.readouterr().err
    assert "holds no episode.json" in err and "prompt_style compact (auto" in err and "--prompt-style" in err


def test_a_bad_episode_flag_and_a_layout_the_agent_cannot_prefill_are_refused(tmp_path, capsys):
    from skillrise_gym.bench.cli import main

    assert main(["--env", "toy", "--agent", "expert", "--episode", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    assert "no episode.json there" in capsys.readouterr().err
    (tmp_path / episodes.FILE).write_text(json.dumps({"version": 1, "episode": {"env": "toy", "split": "train", "K": 2,
                                                                                 "max_task_steps": 2, "new": 1}}))
    assert main(["--env", "toy", "--agent", "expert", "--episode", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    assert "unknown episode field(s) new" in capsys.readouterr().err
    # a held-out split this version does not know: refused, naming the file, unless --split chooses one
    (tmp_path / episodes.FILE).write_text(json.dumps({"version": 1, "held_out_split": "valid_nosuch", "episode": {
        "env": "toy", "split": "train", "K": 2, "max_task_steps": 2}}))
    assert main(["--env", "toy", "--agent", "expert", "--episode", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert str(tmp_path / episodes.FILE) in err and "'valid_nosuch'" in err and "give --split" in err
    assert main(["--env", "toy", "--agent", "expert", "--episode", str(tmp_path), "--split", "test", "--K", "1",
                 "--num-sequences", "1", "--env-workers", "0", "--no-progress", "--no-plots",
                 "--out", str(tmp_path / "o3")]) == 0
    code = main(["--env", "toy", "--agent", "openai", "--base-url", "http://127.0.0.1:9/v1", "--model", "m",
                 "--prompt-style", "compact", "--out", str(tmp_path / "o2")])
    assert code == 2
    err = capsys.readouterr().err
    assert "--prompt-style full" in err and "--prefill continue" in err
    assert not (tmp_path / "o2").exists()


def test_a_chat_template_that_injects_its_own_system_message_is_found():
    from skillrise_gym.models import load_tokenizer, resolve_model_path, template_system_prompt

    tokenizer = load_tokenizer(resolve_model_path("tiny"))
    assert template_system_prompt(tokenizer) is None
    tokenizer.chat_template = (
        "{% if messages[0]['role'] != 'system' %}<|im_start|>system\nYou are SmolLM<|im_end|>\n{% endif %}"
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    assert template_system_prompt(tokenizer) == "You are SmolLM"
