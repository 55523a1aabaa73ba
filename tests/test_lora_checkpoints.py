"""LoRA (PEFT adapter) checkpoints as models: `skillrise_train --lora` saves final/ and checkpoint-N/ as an
adapter folder (adapter_config.json + adapter_model.safetensors, no config.json). `models.load_model_and_tokenizer`
applies one to its base (the adapter config's base_model_name_or_path, resolved like any model name; overridden
by base_model= or $SKILLRISE_BASE_MODEL) and merges it; the `hf` agent and `skillrise-bench` load it that way,
and the transfer experiment counts an arm with such a final/ as finished. All offline, on the tiny model."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytest.importorskip("peft")

import torch  # noqa: E402

from skillrise_gym import models  # noqa: E402
from skillrise_gym.bench.cli import main  # noqa: E402
from skillrise_gym.models import ModelNotFoundError, build_tiny_model, load_model_and_tokenizer  # noqa: E402

PROMPT = "<|im_start|>user\npress red switch<|im_end|>\n<|im_start|>assistant\n"


def _logits(model, tokenizer) -> torch.Tensor:
    ids = tokenizer(PROMPT, return_tensors="pt")["input_ids"]
    with torch.inference_mode():
        return model(input_ids=ids).logits.float()


@pytest.fixture(scope="module")
def lora(tmp_path_factory) -> dict:
    """The tiny model, a LoRA adapter on it saved without tokenizer files (perturbed so that it matters), the
    in-memory peft model's merged logits and the base's logits."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    root = tmp_path_factory.mktemp("lora")
    base_dir = build_tiny_model(root / "tiny")
    base, tokenizer = load_model_and_tokenizer(base_dir)
    base_logits = _logits(base, tokenizer)
    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32, local_files_only=True)
    peft_model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules="all-linear",
                                                  task_type="CAUSAL_LM"))
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if "lora_B" in name:  # zero at initialisation: the adapter would change nothing
                param.copy_(torch.randn(param.shape, generator=generator) * 0.05)
    adapter_dir = root / "adapter"
    peft_model.save_pretrained(adapter_dir)
    config = json.loads((adapter_dir / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = base_dir
    (adapter_dir / "adapter_config.json").write_text(json.dumps(config))
    merged = peft_model.merge_and_unload().eval()
    return {"root": root, "base": base_dir, "adapter": str(adapter_dir), "base_logits": base_logits,
            "logits": _logits(merged, tokenizer)}


def _copy(lora: dict, dest: Path, **config_changes) -> str:
    """A copy of the adapter folder with its adapter_config.json changed."""
    shutil.copytree(lora["adapter"], dest)
    config = json.loads((dest / "adapter_config.json").read_text())
    config.update(config_changes)
    (dest / "adapter_config.json").write_text(json.dumps(config))
    return str(dest)


def test_adapter_is_merged_into_its_base(lora):
    assert not (Path(lora["adapter"]) / "config.json").exists()
    assert models.is_adapter_folder(lora["adapter"]) and models.is_model_folder(lora["adapter"])
    assert models.is_model_folder(lora["base"]) and not models.is_adapter_folder(lora["base"])
    assert models.resolve_model_path(lora["adapter"]) == str(Path(lora["adapter"]).resolve())
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model, tokenizer = load_model_and_tokenizer(lora["adapter"])
    # peft reading transformers' deprecated alias is no warning of the user's (it printed on every bench run)
    assert not [w for w in caught if "is_gradient_checkpointing" in str(w.message)], [str(w.message) for w in caught]
    assert type(model).__name__ == "Qwen3ForCausalLM" and not model.training  # merged: a plain model, no peft
    logits = _logits(model, tokenizer)
    assert torch.allclose(logits, lora["logits"], atol=1e-5)
    assert not torch.allclose(logits, lora["base_logits"], atol=1e-3)
    # the tokenizer came from the base (the adapter folder holds none); an adapter trained on this model
    # would record the adapter folder, not the bare base, as its base
    assert tokenizer.apply_chat_template([{"role": "user", "content": "press red switch"}], tokenize=False,
                                         add_generation_prompt=True) == PROMPT
    assert model.name_or_path == str(Path(lora["adapter"]).resolve())
    summary = models.describe(models.resolve_model_path(lora["adapter"]))
    assert summary["adapter"] and summary["base_model"] == lora["base"] and summary["base_path"] == lora["base"]
    assert summary["architectures"] == ["Qwen3ForCausalLM"] and summary["peft_type"] == "LORA" and summary["r"] == 4


def test_adapter_tokenizer_comes_from_its_folder_when_it_holds_one(lora, tmp_path):
    from transformers import AutoTokenizer

    adapter = _copy(lora, tmp_path / "with-tokenizer")
    tokenizer = AutoTokenizer.from_pretrained(lora["base"], local_files_only=True)
    tokenizer.chat_template = models.CHATML_TEMPLATE + "{# the adapter's own #}"
    tokenizer.save_pretrained(adapter)
    assert models.is_adapter_folder(adapter)  # tokenizer files do not make it a whole model
    _, loaded = load_model_and_tokenizer(adapter)
    assert loaded.chat_template.endswith("{# the adapter's own #}")


def test_missing_base_names_it_and_the_overrides_fix_it(lora, tmp_path, monkeypatch):
    monkeypatch.delenv(models.BASE_MODEL_ENV, raising=False)
    gone = str(tmp_path / "other-machine" / "my-base-model")
    adapter = _copy(lora, tmp_path / "moved", base_model_name_or_path=gone)
    for call in (lambda: models.resolve_model_path(adapter), lambda: load_model_and_tokenizer(adapter)):
        with pytest.raises(ModelNotFoundError) as caught:
            call()
        message = str(caught.value)
        assert gone in message and "\n" not in message
        assert "--base-model" in message and "SKILLRISE_BASE_MODEL" in message and "base_model=" in message
    hub = _copy(lora, tmp_path / "hub", base_model_name_or_path="some-org/base-that-is-not-cached")
    with pytest.raises(ModelNotFoundError, match="'some-org/base-that-is-not-cached'.*nothing is downloaded"):
        models.resolve_model_path(hub)

    model, tokenizer = load_model_and_tokenizer(adapter, base_model=lora["base"])
    assert torch.allclose(_logits(model, tokenizer), lora["logits"], atol=1e-5)
    monkeypatch.setenv(models.BASE_MODEL_ENV, lora["base"])
    model, tokenizer = load_model_and_tokenizer(adapter)
    assert torch.allclose(_logits(model, tokenizer), lora["logits"], atol=1e-5)
    # the override is for adapters: a whole model with a base is refused
    with pytest.raises(ValueError, match="PEFT adapter folder only"):
        load_model_and_tokenizer(lora["base"], base_model="tiny")


def test_another_machines_alias_cache_path_means_that_alias(lora, tmp_path, monkeypatch):
    """Runs record the base as their machine's resolved folder (~/.cache/skillrise/models/<alias folder>)."""
    monkeypatch.delenv(models.BASE_MODEL_ENV, raising=False)
    stale = f"/nonexistent-home/.cache/skillrise/models/{models.TINY_FOLDER}"
    adapter = _copy(lora, tmp_path / "tiny-alias", base_model_name_or_path=stale)
    assert models.resolve_adapter_base(adapter) == models.resolve_model_path("tiny")
    model, tokenizer = load_model_and_tokenizer(adapter)  # "tiny" is the same deterministic build
    assert torch.allclose(_logits(model, tokenizer), lora["logits"], atol=1e-5)

    smol = _copy(lora, tmp_path / "smol-alias",
                 base_model_name_or_path="/nonexistent-home/.cache/skillrise/models/smollm2-135m-instruct")
    monkeypatch.setattr(models, "_smollm2_dir", lambda: Path(lora["base"]))  # (without the wheel's conversion)
    assert models.resolve_adapter_base(smol) == lora["base"]
    unknown = _copy(lora, tmp_path / "unknown", base_model_name_or_path="/nonexistent-home/models/not-an-alias")
    with pytest.raises(ModelNotFoundError, match="not-an-alias.*SKILLRISE_BASE_MODEL"):
        models.resolve_adapter_base(unknown)


def test_an_adapter_trained_on_a_loaded_adapter_stacks_on_it(lora, tmp_path, monkeypatch):
    """Training with --lora from an adapter folder: the merged model is named after the adapter, so the new
    adapter records it (not the bare base) as its base, and loads through both."""
    from peft import LoraConfig, get_peft_model

    monkeypatch.delenv(models.BASE_MODEL_ENV, raising=False)
    model, tokenizer = load_model_and_tokenizer(lora["adapter"])
    second = get_peft_model(model, LoraConfig(r=4, target_modules="all-linear", task_type="CAUSAL_LM"))
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, param in second.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.05)
    second.save_pretrained(tmp_path / "second")
    assert models.adapter_config(tmp_path / "second")["base_model_name_or_path"] == str(Path(lora["adapter"]).resolve())
    expected = _logits(second.merge_and_unload().eval(), tokenizer)
    stacked, _ = load_model_and_tokenizer(str(tmp_path / "second"))
    assert torch.allclose(_logits(stacked, tokenizer), expected, atol=1e-5)
    assert models.describe(str(tmp_path / "second"))["architectures"] == ["Qwen3ForCausalLM"]
    loop = _copy(lora, tmp_path / "loop", base_model_name_or_path=str(tmp_path / "loop"))
    with pytest.raises(ModelNotFoundError, match="its own base"):
        models.resolve_model_path(loop)


def test_missing_peft_names_the_train_extra(lora, monkeypatch):
    from skillrise_gym.backends.base import MissingDependencyError

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "peft" else real(name, *a))
    with pytest.raises(MissingDependencyError, match=r"pip install 'skillrise-gym\[train\]'"):
        load_model_and_tokenizer(lora["adapter"])


def _bench(out: Path, *extra: str) -> int:
    return main(["--env", "rulebook", "--agent", "hf", "--max-new-tokens", "4", "--K", "1", "--num-sequences", "1",
                 "--batch-size", "1", "--threads", "1", "--env-workers", "0", "--no-progress", "--no-plots",
                 "--out", str(out), *extra])


def test_bench_evaluates_an_adapter(lora, tmp_path, monkeypatch, capsys):
    monkeypatch.delenv(models.BASE_MODEL_ENV, raising=False)
    assert _bench(tmp_path / "run", "--model", lora["adapter"]) == 0
    agent = json.loads((tmp_path / "run" / "summary.json").read_text())["agent"]
    assert agent["model"] == lora["adapter"] and agent["adapter"] is True
    assert agent["base_model"] == lora["base"] and agent["base_path"] == lora["base"]

    moved = _copy(lora, tmp_path / "moved", base_model_name_or_path=str(tmp_path / "gone" / "base"))
    capsys.readouterr()
    assert _bench(tmp_path / "refused", "--model", moved) == 2
    error = capsys.readouterr().err
    assert str(tmp_path / "gone" / "base") in error and "--base-model" in error
    assert not (tmp_path / "refused").exists()
    assert _bench(tmp_path / "overridden", "--model", moved, "--base-model", lora["base"]) == 0
    agent = json.loads((tmp_path / "overridden" / "summary.json").read_text())["agent"]
    assert agent["base_model"] == lora["base"]
    # --base-model is the hf agent's, and for adapters only
    assert _bench(tmp_path / "whole", "--model", lora["base"], "--base-model", "tiny") == 2
    assert main(["--env", "rulebook", "--agent", "expert", "--base-model", "tiny", "--out", str(tmp_path / "x")]) == 2
    assert "--base-model" in capsys.readouterr().err


def test_transfer_experiment_counts_a_lora_final_as_finished(lora, tmp_path, monkeypatch, transfer_experiment):
    experiment = transfer_experiment

    def train(config):
        raise AssertionError("a finished arm (its final/ a LoRA adapter) was trained again")

    monkeypatch.setattr("skillrise_train.cli.run", train)
    arm = tmp_path / "work" / "skillrise"
    shutil.copytree(lora["adapter"], arm / "final")
    (arm / "metrics.jsonl").write_text(json.dumps({"rollout": 1, "success/mean": 0.5, "format_valid": 1.0}) + "\n")
    (arm / "wall_seconds.txt").write_text("12.5\n")
    result = experiment.train_arm("skillrise", "tiny", experiment.Preset(lora=True), tmp_path / "work", print)
    assert result["wall_seconds"] == 12.5 and result["curve"] == [{"step": 1, "success/mean": 0.5, "format_valid": 1.0}]
    assert models.is_model_folder(arm / "final")
    (arm / "final" / "adapter_model.safetensors").unlink()  # an adapter without its weights is no model
    assert not models.is_model_folder(arm / "final") and not models.is_adapter_folder(arm / "final")


@pytest.mark.slow
def test_the_transfer_experiments_gpu_preset_runs_end_to_end_at_tiny_size_and_reuses_its_lora_arms(
        tmp_path, monkeypatch, transfer_experiment):
    """--scale trains LoRA arms and evaluates their final/ adapters through the bench; a rerun reuses them."""
    experiment = transfer_experiment
    args = ["--scale", "--model", "tiny", "--steps", "1", "--K", "2", "--G", "2", "--S", "1", "--eval-sequences", "2",
            "--eval-K", "1", "2", "--arms", "skillrise", "grpo", "--max-new-tokens", "8",
            "--work-dir", str(tmp_path / "work"), "--results-dir", str(tmp_path / "results")]
    assert experiment.main(args) == 0
    report = json.loads((tmp_path / "results" / "transfer_experiment.json").read_text())
    assert set(report["evaluations"]) >= {"skillrise", "grpo"} and report["preset"]["lora"] is True
    # R=2: each policy's solver is also measured on the perfect curator's documents (the LoRA adapter loads)
    assert len(report["evaluations"]["skillrise"]["reading"]["success_by_position"]) == 2
    for arm in ("skillrise", "grpo"):
        assert models.is_adapter_folder(tmp_path / "work" / arm / "final")

    def train(config):
        raise AssertionError("a finished LoRA arm was trained again")

    monkeypatch.setattr("skillrise_train.cli.run", train)
    assert experiment.main(args) == 0
