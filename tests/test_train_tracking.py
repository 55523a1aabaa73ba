"""skillrise-train --report-to: the run's own settings as hyperparameters, training and held-out evaluation
metrics on one step axis (TensorBoard's event files read back); a tracker that is not installed, or trackers
given twice, are refused before the model loads."""

from __future__ import annotations

import importlib.util

import pytest

pytest.importorskip("trl")

from skillrise_train.cli import main  # noqa: E402

TINY = ["--env", "rulebook", "--model", "tiny", "--K", "2", "--G", "2", "--S", "1", "--warmstart-steps", "0",
        "--threads", "1"]


def test_tensorboard_gets_the_runs_settings_and_its_evaluations(tmp_path, capsys):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import metadata

    out = tmp_path / "run"
    assert main(TINY + ["--steps", "2", "--eval-interval", "1", "--eval-sequences", "2", "--report-to", "tensorboard",
                        "--output-dir", str(out)]) == 0
    console = capsys.readouterr().out
    header = console.index("success/pos")
    assert header < console.index("   1 |")  # the table's header comes before the first step ends
    events = EventAccumulator(str(out / "tensorboard"))
    events.Reload()
    scalars = set(events.Tags()["scalars"])
    assert {"eval/success", "eval/success/pos0", "eval/success/pos1", "train/loss", "train/success/pos1"} <= scalars
    assert [e.step for e in events.Scalars("eval/success")] == [1, 2]
    assert [e.step for e in events.Scalars("train/loss")] == [1, 2]  # one step axis
    start = metadata.parse_session_start_info_plugin_data(
        events.PluginTagToContent("hparams")["_hparams_/session_start_info"])
    hparams = {k: v.string_value or v.number_value for k, v in start.hparams.items()}
    assert hparams["env"] == "rulebook" and hparams["algo"] == "skillrise" and hparams["K"] == 2
    assert hparams["G"] == 2 and hparams["episode/prompt_style"] == "compact"
    assert "num_train_epochs" not in hparams  # the run's settings, not TRL's GRPOConfig


def test_a_missing_tracker_or_trackers_given_twice_are_refused_before_the_model_loads(tmp_path, capsys, monkeypatch):
    from skillrise_gym import tracking

    real = importlib.util.find_spec
    monkeypatch.setattr(tracking.importlib.util, "find_spec", lambda name: None if name == "wandb" else real(name))
    loaded = []
    import skillrise_gym.models as models

    monkeypatch.setattr(models, "load_model_and_tokenizer", lambda *a, **k: loaded.append(a))
    assert main(TINY + ["--report-to", "wandb", "--output-dir", str(tmp_path / "a")]) == 2
    assert "--report-to wandb needs the wandb package, which is not installed: pip install wandb" in capsys.readouterr().err
    assert main(TINY + ["--report-to", "tensorboard", "--trl-options", '{"report_to": "tensorboard"}',
                        "--output-dir", str(tmp_path / "b")]) == 2
    assert "trackers given twice" in capsys.readouterr().err
    assert main(TINY + ["--report-to", "none", "tensorboard", "--output-dir", str(tmp_path / "c")]) == 2
    assert "none with other trackers" in capsys.readouterr().err
    assert main(TINY + ["--report-to", "mlflow", "--output-dir", str(tmp_path / "d")]) == 2
    assert "invalid choice: 'mlflow'" in capsys.readouterr().err
    assert not loaded and not any((tmp_path / d).exists() for d in "abcd")


def test_the_bench_reports_its_summary_to_tensorboard(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from skillrise_gym.bench.cli import main as bench

    out = tmp_path / "bench"
    assert bench(["--env", "rulebook", "--agent", "expert", "--K", "2", "--num-sequences", "3", "--memory", "skill",
                  "none", "--out", str(out), "--no-progress", "--no-plots", "--report-to", "tensorboard"]) == 0
    events = EventAccumulator(str(out / "tensorboard"))
    events.Reload()
    assert {"skill/K2/success", "none/K2/success/pos1", "skill/K2/cost_per_task/model_calls"} <= set(events.Tags()["scalars"])
    assert events.Scalars("skill/K2/success")[0].value == 1.0
    # a rerun resumes the folder: the tracker's files are the run's own, not foreign
    assert bench(["--env", "rulebook", "--agent", "expert", "--K", "2", "--num-sequences", "3", "--memory", "skill",
                  "none", "--out", str(out), "--no-progress", "--no-plots"]) == 0
