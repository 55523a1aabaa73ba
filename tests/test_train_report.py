"""What a finished run leaves for a reader (skillrise_train/report.py): learning curves and model cards in
place of TRL's and PEFT's templates, and `skillrise-train plot RUN`."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("trl")

from skillrise_train.cli import main  # noqa: E402
from skillrise_train.report import model_card  # noqa: E402


def test_a_run_ends_with_its_learning_curves_and_model_cards(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["--env", "rulebook", "--model", "tiny", "--K", "2", "--G", "2", "--S", "1", "--steps", "2",
                 "--warmstart-steps", "0", "--threads", "1", "--eval-interval", "1", "--eval-sequences", "2",
                 "--output-dir", str(out)]) == 0
    assert f"learning curves: {out / 'learning_curves.png'}" in capsys.readouterr().out
    assert (out / "learning_curves.png").stat().st_size > 10_000
    last = json.loads((out / "eval.jsonl").read_text().splitlines()[-1])
    for folder, final in ((out, False), (out / "final", True)):
        card = (folder / "README.md").read_text()
        assert "fine-tuned version of" not in card and "trained with GRPO" not in card  # not the templates
        assert "algorithm `skillrise` (curate credit `future`), env `rulebook` split `train`, K=2" in card
        assert f"Held-out evaluation at step {last['step']} (split `test`, 2 sequences" in card
        assert ("--model ." if final else "--model final") in card
        assert ("--config ../config.json" if final else "--config config.json") in card
    (out / "learning_curves.png").unlink()
    assert main(["plot", str(out)]) == 0 and (out / "learning_curves.png").is_file()
    assert main(["plot", str(tmp_path / "nothing")]) == 2
    assert "no metrics.jsonl with a step in it" in capsys.readouterr().err


def test_an_embedded_model_names_its_hub_original_as_base_model(tmp_path):
    config = {"model": "smollm2", "lora": True, "algo": "grpo", "env": "webshop", "K": 1, "episode": {}}
    card = model_card(tmp_path, config, final=True)
    assert "base_model: HuggingFaceTB/SmolLM2-135M-Instruct" in card and "library_name: peft" in card
    assert "- grpo\n- webshop" in card
    assert "base_model" not in model_card(tmp_path, {**config, "model": "/some/folder"}, final=True)
