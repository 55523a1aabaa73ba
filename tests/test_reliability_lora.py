"""Damaged LoRA checkpoints in the bench (issue 46, item 8): a truncated or zeroed adapter_model.safetensors (a
checkpoint-N cut mid-write), an adapter_config.json without peft_type or with an `r` that is not a number, a
--base-model of another size: one line naming the folder and what is wrong, exit 2, before anything is written.
All offline, on the tiny model (the `lora` fixture of tests/test_lora_checkpoints.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytest.importorskip("peft")

from test_lora_checkpoints import _bench, _copy, lora  # noqa: E402, F401 (the fixture)

from skillrise_gym import models  # noqa: E402
from skillrise_gym.bench.cli import EXIT_USAGE  # noqa: E402

WEIGHTS = "adapter_model.safetensors"


def _error_line(err: str) -> str:
    """The one error line of the bench's stderr (beside it: the note that the folder holds no episode.json, and
    transformers' loading bar of a base model loaded before the adapter is found not to fit it)."""
    assert "Traceback" not in err, err
    [line] = [line for line in err.splitlines() if "error" in line.lower()]
    assert line.startswith("skillrise-bench: error: "), err
    return line


def _truncate(folder: Path) -> None:
    data = (folder / WEIGHTS).read_bytes()
    (folder / WEIGHTS).write_bytes(data[: len(data) // 2])


def _zero(folder: Path) -> None:
    (folder / WEIGHTS).write_bytes(bytes((folder / WEIGHTS).stat().st_size))


def _header_only(folder: Path) -> None:
    data = (folder / WEIGHTS).read_bytes()
    size = int.from_bytes(data[:8], "little")
    (folder / WEIGHTS).write_bytes(data[: 8 + size])  # cut right after the header: no tensor data at all


def _config(**changes):
    def edit(folder: Path) -> None:
        path = folder / "adapter_config.json"
        config = json.loads(path.read_text())
        for key, value in changes.items():
            if value is KeyError:
                config.pop(key, None)
            else:
                config[key] = value
        path.write_text(json.dumps(config))
    return edit


DAMAGE = {
    "truncated weights": (_truncate, WEIGHTS),
    "zeroed weights": (_zero, WEIGHTS),
    "weights cut after the header": (_header_only, WEIGHTS),
    "no peft_type": (_config(peft_type=KeyError), "peft_type"),
    "unknown peft_type": (_config(peft_type="NOSUCH"), "peft_type"),
    "r a string": (_config(r="four"), "r"),
    "r null": (_config(r=None), "r"),
    "r zero": (_config(r=0), "r"),
    "lora_alpha a string": (_config(lora_alpha="eight"), "lora_alpha"),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_adapter_is_one_line_naming_the_folder_and_nothing_is_written(lora, tmp_path, monkeypatch, capsys,
                                                                                damage):
    monkeypatch.delenv(models.BASE_MODEL_ENV, raising=False)
    apply, what = DAMAGE[damage]
    adapter = Path(_copy(lora, tmp_path / "checkpoint-3"))
    apply(adapter)
    capsys.readouterr()
    out = tmp_path / "run"
    assert _bench(out, "--model", str(adapter)) == EXIT_USAGE
    err = _error_line(capsys.readouterr().err)
    assert str(adapter) in err and what in err, err
    assert not out.exists()
    with pytest.raises(ValueError, match=what) as caught:  # the library says the same
        models.load_model_and_tokenizer(str(adapter))
    assert str(adapter) in str(caught.value) and "\n" not in str(caught.value)


def test_a_base_model_of_another_size_is_one_line_naming_both(lora, tmp_path, monkeypatch, capsys):
    monkeypatch.delenv(models.BASE_MODEL_ENV, raising=False)
    wider = models.build_tiny_model(tmp_path / "wider", hidden_size=96)
    out = tmp_path / "run"
    capsys.readouterr()
    assert _bench(out, "--model", lora["adapter"], "--base-model", wider) == EXIT_USAGE
    err = _error_line(capsys.readouterr().err)
    assert lora["adapter"] in err and wider in err and "size" in err, err
    assert not out.exists()
    # the adapter's own base still loads it
    assert _bench(tmp_path / "fine", "--model", lora["adapter"]) == 0
