"""Bench metrics: bootstrap CIs, Pass@k, rates, the Markdown table and the PNG plots, on hand-made results."""

from __future__ import annotations

import numpy as np
import pytest

from skillrise_gym.bench import metrics, plots


def result(index: int, success: list[bool], K: int | None = None, **overrides) -> dict:
    K = K or len(success)
    row = {"K": K, "index": index, "family": "f", "success": success, "score": [float(s) for s in success],
           "steps": [3] * K, "engine_errors": [None] * K, "calls": 2 * K, "solve_calls": K, "invalid_format": 1,
           "invalid_format_solve": 1, "prompt_tokens": 100, "completion_tokens": 10, "agent_s": 0.5, "wall_s": 1.0}
    row.update(overrides)
    return row


def test_bootstrap_is_seeded_and_brackets_the_mean():
    values = np.random.default_rng(1).random(50)
    a, b = metrics.bootstrap_ci(values, seed=3), metrics.bootstrap_ci(values, seed=3)
    assert np.array_equal(a, b)
    assert a[0] <= values.mean() <= a[1] and a[1] - a[0] < 0.3
    assert list(metrics.bootstrap_ci(np.ones(7))) == [1.0, 1.0]
    assert list(metrics.bootstrap_ci(np.array([0.25]))) == [0.25, 0.25]
    per_column = metrics.bootstrap_ci(np.stack([values, 1 - values], axis=1))
    assert per_column.shape == (2, 2)


@pytest.mark.parametrize("p, df, expected", [(0.975, 1, 12.7062), (0.975, 2, 4.3027), (0.975, 3, 3.1824),
                                              (0.975, 6, 2.4469), (0.975, 30, 2.0423), (0.995, 1, 63.6567),
                                              (0.95, 9, 1.8331), (0.5, 4, 0.0)])
def test_t_quantile_matches_the_tables(p, df, expected):
    from skillrise_gym.bench.metrics import t_quantile

    assert abs(t_quantile(p, df) - expected) < 5e-5


def test_t_quantile_refuses_what_it_cannot_answer():
    from skillrise_gym.bench.metrics import t_quantile

    for p, df in ((0.975, 0), (0.975, 1.5), (1.0, 3), (0.4, 3)):
        with pytest.raises(ValueError, match="t_quantile needs"):
            t_quantile(p, df)


def test_block_rates_and_pass_at_k():
    rows = [result(0, [False, True, True]), result(1, [False, False, False]), result(2, [True, False, True]),
            result(3, [False, False, True])]
    block = metrics.summarize_block(rows, 3, "repeat")
    assert block["success"]["mean"] == pytest.approx(5 / 12)
    assert [p["mean"] for p in block["success_by_position"]] == pytest.approx([0.25, 0.25, 0.75])
    assert [block["pass_at_k"][k]["mean"] for k in "123"] == pytest.approx([0.25, 0.5, 0.75])
    assert block["invalid_format_rate"] == pytest.approx(4 / 24)
    assert block["prompt_tokens"] == 400 and block["completion_tokens"] == 40
    assert block["steps_per_task"]["mean"] == 3.0
    assert "pass_at_k" not in metrics.summarize_block(rows, 3, "cross")


def test_summary_table_and_plots(tmp_path):
    rows = [result(i, [i % 2 == 0], K=1) for i in range(5)] + [result(i, [True, i % 3 == 0]) for i in range(5)]
    summary = metrics.summarize(rows, [1, 2, 4], "cross")
    assert [p["K"] for p in summary["success_vs_K"]] == [1, 2]  # K=4 has no finished sequence yet
    table = metrics.markdown_table(summary, "toy")
    lines = table.strip().splitlines()
    assert lines[0] == "### toy" and lines[2].startswith("| K | seqs |")
    assert "| 2 | 5 | 0.70 [" in table and "| 1.00 / 0.40 |" in table and lines[-1].startswith("| 4 | 0 |")
    for draw, name in ((plots.plot_success_by_position, "a.png"), (plots.plot_success_vs_K, "b.png")):
        path = draw(summary, tmp_path / name)
        assert path.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
        import matplotlib.image

        image = matplotlib.image.imread(path)
        assert image.shape[0] > 100 and image.shape[1] > 100
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.png", "b.png"]  # no temporary files left


# ------------------------------------------------------------------ Wilson intervals for success rates
@pytest.mark.parametrize("successes, expected", [(20, (0.8389, 1.0)), (0, (0.0, 0.1611)), (10, (0.2993, 0.7007))])
def test_wilson_ci_hand_computed(successes, expected):
    # p = 1, z = 1.959964: lower = n / (n + z^2) = 20 / 23.8415 = 0.83887; 0/20 mirrors it; 10/20 is
    # 0.5 -+ z * sqrt(0.25/20 + z^2/1600) / (1 + z^2/20) = 0.5 -+ 0.2007
    low, high = metrics.wilson_ci(successes, 20)
    assert (low, high) == pytest.approx(expected, abs=5e-5)
    assert 0.0 <= low < high <= 1.0
    assert metrics.wilson_ci(20, 20)[1] == 1.0 and metrics.wilson_ci(0, 20)[0] == 0.0  # exact ends
    assert all(np.isnan(metrics.wilson_ci(0, 0)))


def test_success_rates_use_wilson_and_are_never_zero_width():
    rows = [result(i, [True, True]) for i in range(20)]  # 20/20 sequences solved everything
    block = metrics.summarize_block(rows, 2, "repeat")
    for stat in [block["success"], *block["success_by_position"], *block["pass_at_k"].values()]:
        assert stat["method"] == "wilson" and stat["mean"] == 1.0
        assert stat["ci"] == pytest.approx([0.8389, 1.0], abs=5e-5)
    failed = metrics.summarize_block([result(i, [False, False]) for i in range(20)], 2, "cross")
    assert failed["success"]["ci"] == pytest.approx([0.0, 0.1611], abs=5e-5)
    assert failed["success_by_position"][0]["ci"] == pytest.approx([0.0, 0.1611], abs=5e-5)
    half = metrics.summarize_block([result(i, [i % 2 == 0]) for i in range(20)], 1, "cross")  # K=1: 10/20
    assert half["success"]["method"] == "wilson"
    assert half["success"]["ci"] == pytest.approx([0.2993, 0.7007], abs=5e-5)
    # fractional per-sequence means (K=2, some sequences half solved): the bootstrap over sequences
    mixed = metrics.summarize_block([result(i, [True, i % 2 == 0]) for i in range(20)], 2, "cross")
    assert mixed["success"]["method"] == "bootstrap" and mixed["success"]["mean"] == pytest.approx(0.75)
    assert mixed["success_by_position"][1]["method"] == "wilson"
    # non-binary means (scores, steps, seconds) keep the bootstrap
    assert {block[k]["method"] for k in ("score", "steps_per_task", "sequence_wall_seconds")} == {"bootstrap"}
    summary = metrics.summarize(rows, [2], "repeat")
    assert summary["ci_method"] == metrics.CI_METHOD and summary["confidence"] == 0.95
    assert summary["success_vs_K"][0]["method"] == "wilson"
    assert set(summary["success_vs_K"][0]) == {"K", "mean", "ci", "method"}


# ------------------------------------------------------------------ plots: integer ticks, CI bands
def _capture_figures(monkeypatch, module) -> list:
    figures = []
    save = module._save

    def keep(fig, path):
        figures.append(fig)
        return save(fig, path)

    monkeypatch.setattr(module, "_save", keep)
    return figures


def _assert_integer_xticks(ax) -> None:
    ticks = list(ax.get_xticks())
    assert ticks and all(float(t).is_integer() for t in ticks), ticks
    labels = [t.get_text().replace("\u2212", "-") for t in ax.get_xticklabels() if t.get_text()]
    assert labels and all(label.lstrip("-").isdigit() for label in labels), labels


def _bands(ax) -> list:
    from matplotlib.collections import PolyCollection

    return [c for c in ax.collections if isinstance(c, PolyCollection) and c.get_alpha() == pytest.approx(0.2)]


def _carry_summary(mode: str = "cross") -> dict:
    Ks = [1, 2, 4]
    rows = {
        "skill": [result(i, [True] * K if i % 2 else [j % 2 == 0 for j in range(K)]) for K in Ks for i in range(6)],
        "none": [result(i, [j == 0 and i % 3 == 0 for j in range(K)]) for K in Ks for i in range(6)],
        "reflect": [result(i, [(i + j) % 2 == 0 for j in range(K)]) for K in Ks for i in range(6)],
    }
    return {"mode": mode, "K": Ks, "by_carry": {m: metrics.summarize(r, Ks, mode) for m, r in rows.items()}}


@pytest.mark.parametrize("mode", ["cross", "repeat"])
def test_plots_have_integer_ticks_and_ci_bands(tmp_path, monkeypatch, mode):
    figures = _capture_figures(monkeypatch, plots)
    rows = [result(i, [i % 2 == 0], K=1) for i in range(5)] + [result(i, [True, i % 3 == 0]) for i in range(5)] + \
        [result(i, [i % 2 == 0, True, i % 3 == 0, False]) for i in range(5)]
    summary = metrics.summarize(rows, [1, 2, 4], mode)
    carry = _carry_summary(mode)
    drawn = [plots.plot_success_by_position(summary, tmp_path / "by_position.png"),
             plots.plot_success_vs_K(summary, tmp_path / "vs_K.png"),
             plots.plot_carry_success_by_position(carry, tmp_path / "carry_by_position.png"),
             plots.plot_carry_success_vs_K(carry, tmp_path / "carry_vs_K.png")]
    assert all(path.is_file() and path.read_bytes().startswith(b"\x89PNG") for path in drawn)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in drawn)
    by_position, vs_K, carry_by_position, carry_vs_K = figures
    for fig in figures:
        for ax in fig.axes:
            _assert_integer_xticks(ax)
    # task positions from 0, as in the JSON; attempts (repeat mode, Pass@k) from 1
    assert list(by_position.axes[0].get_xticks()) == ([1, 2, 3, 4] if mode == "repeat" else [0, 1, 2, 3])
    assert by_position.axes[0].get_xlabel() == ("attempt k" if mode == "repeat" else
                                                "task position (0-based, as in summary.json)")
    assert len(_bands(by_position.axes[0])) == 2  # K=2 and K=4 (K=1, one point: an error bar)
    assert list(vs_K.axes[0].get_xticks()) == [1, 2, 4] and len(_bands(vs_K.axes[0])) == 1
    # carry modes side by side: one panel per K sharing y, one line (and band) per mode in each
    panels = carry_by_position.axes
    assert [ax.get_title() for ax in panels] == ["K=1", "K=2", "K=4"]
    assert panels[0].get_shared_y_axes().joined(panels[0], panels[2])
    assert [len(_bands(ax)) for ax in panels] == [0, 3, 3]
    assert sorted(t.get_text().split(" ")[0] for t in panels[2].get_legend().get_texts()) == ["none", "reflect", "skill"]
    assert list(carry_vs_K.axes[0].get_xticks()) == [1, 2, 4] and len(_bands(carry_vs_K.axes[0])) == 3


def test_transfer_experiment_plots(tmp_path, monkeypatch, transfer_experiment):
    from pathlib import Path

    module = transfer_experiment
    monkeypatch.setattr(module, "RESULTS", tmp_path)
    figures = _capture_figures(monkeypatch, module)
    eval_K = [1, 2, 4, 6]

    def evaluation(offset: float) -> dict:
        def rate(m):
            m = min(1.0, m + offset)
            return {"mean": m, "ci": [max(0.0, m - 0.1), min(1.0, m + 0.1)]}

        return {"by_carry": {carry: {str(k): {"success": rate(0.1 * k), "success_by_position": [
            rate(0.1 * j) for j in range(k)], "invalid_format_rate": 0.0} for k in eval_K} for carry in module.CARRY}}

    report = {
        "preset": {"eval_K": eval_K, "seed": 0},
        "arms": {arm: {"curve": [{"step": s, "success/pos0": 0.1 * s, "success/pos1": 0.05 * s} for s in range(7)]}
                 for arm in ("skillrise", "grpo")},
        "evaluations": {"untrained": evaluation(0.0), "skillrise": evaluation(0.2), "grpo": evaluation(0.1)},
        "ceilings": {"ignore_document": [0.3] * 6, "perfect_curator": [0.3] + [1.0] * 5},
    }
    paths = module.plots(report)
    assert sorted(Path(p).name for p in paths) == sorted(p.name for p in tmp_path.iterdir()) == [
        "transfer_learning_curves.png", "transfer_success_by_position.png", "transfer_success_vs_K.png"]
    curves, by_position, vs_K = figures
    for fig in figures:
        for ax in fig.axes:
            _assert_integer_xticks(ax)
    assert list(by_position.axes[0].get_xticks()) == [1, 2, 3, 4, 5, 6]
    assert len(_bands(by_position.axes[0])) == 3  # one band per arm
    assert [ax.get_title() for ax in vs_K.axes] == [f"carry {m}" for m in module.CARRY]  # carry modes side by side
    assert all(list(ax.get_xticks()) == eval_K and len(_bands(ax)) == 3 for ax in vs_K.axes)


def test_the_reading_check_scores_a_solver_on_the_perfect_curators_documents(tmp_path, transfer_experiment):
    """benchmarks/experiments/transfer_experiment.py's PerfectDocuments: the perfect curator's documents, solved
    by the scripted perfect reader (reads the rule about the item) and by the latest-rule agent (follows the
    first rule whatever the item): the first reads its own rule every time, the second about half the time."""
    module = transfer_experiment
    p = module.Preset(rules=2, bins=4, eval_sequences=60, eval_K=[4])
    shares = {}
    for name, keep in (("reader", True), ("latest", False)):
        out = tmp_path / name
        summary = module.held_out_bench(None, p, out, module.PerfectDocuments(module.ScriptedCurator(keep)), K=[4],
                                        carry=["skill"])
        held = module.held_documents(out / "turns.jsonl", p)["4"]
        assert held["states_all"] == 1.0  # the documents are the perfect curator's whoever solves
        assert held["reading_turns"] >= 20
        shares[name] = held["reads_own_rule"]
        positions = [x["mean"] for x in summary["by_carry"]["skill"]["blocks"][0]["success_by_position"]]
        assert positions[0] < 0.5
    assert shares["reader"] == 1.0
    assert 0.2 < shares["latest"] < 0.8


def test_the_reading_probe_runs_and_appends_its_row(tmp_path, monkeypatch):
    """benchmarks/experiments/reading_probe.py at toy size: notes of several rules only, a row with
    follow_several."""
    import json

    from benchmarks.experiments import reading_probe as module

    monkeypatch.setattr(module, "RESULTS", tmp_path / "probe.json")
    for _ in range(2):
        assert module.main(["--steps", "2", "--sequences", "3"]) == 0
    rows = json.loads((tmp_path / "probe.json").read_text())
    assert len(rows) == 2 and rows[0]["examples"] > 0 and rows[0]["command"].endswith("--steps 2 --sequences 3")
    # two steps teach no format: the check's own play may reveal no rule to build notes of several from
    assert rows[0]["follow_several"] is None or 0.0 <= rows[0]["follow_several"] <= 1.0


def test_transfer_experiment_passes_its_pretrained_model_flags_on(tmp_path, monkeypatch, transfer_experiment):
    """--warmstart-lr/--warmstart-batch/--lora reach the warm start, --dtype the arms' training (a bf16 sampler
    copy and an autocast update) and the evaluation's agent, --eval-carry the carry modes evaluated."""
    module = transfer_experiment
    seen = {}
    monkeypatch.setattr(module, "run_seed", lambda p, work, args, log, shared: seen.setdefault("preset", p) and {
        "preset": {}, "arms": {}, "evaluations": {}, "ceilings": {}})
    monkeypatch.setattr(module, "markdown", lambda report: "")
    monkeypatch.setattr(module, "plots", lambda report: [])
    assert module.main(["--model", "smollm2-135m-instruct", "--lora", "--warmstart-lr", "1e-3", "--warmstart-batch", "8",
                        "--dtype", "bfloat16", "--eval-carry", "skill", "none", "--work-dir", str(tmp_path / "w"),
                        "--results-dir", str(tmp_path / "r")]) == 0
    p = seen["preset"]
    assert (p.lora, p.warmstart_lr, p.warmstart_batch, p.dtype, p.eval_carry) == (True, 1e-3, 8, "bfloat16",
                                                                                  ["skill", "none"])
    assert module.Preset().eval_carry == ["skill", "none", "reflect"] and module.Preset().dtype == "float32"
    with pytest.raises(SystemExit):  # a carry mode that does not exist
        module.main(["--eval-carry", "rules", "--work-dir", str(tmp_path / "w")])
    from skillrise_train import cli

    configs = []
    monkeypatch.setattr(cli, "run", lambda config: configs.append(config))
    with pytest.raises(FileNotFoundError):  # no metrics.jsonl: the stubbed run wrote nothing
        module.train_arm("skillrise", "tiny", p, tmp_path / "arms", print)
    assert configs[0].generation_dtype == "bfloat16" and configs[0].bf16 and configs[0].lora
    import skillrise_gym.agents.hf_agent as hf_agent

    monkeypatch.setattr(hf_agent, "HFAgent", lambda config: config)
    assert module.policy_agent("some/model", p).dtype == "bfloat16"
    assert module.policy_agent("some/model", module.Preset()).dtype is None  # float32: the agent's default


def test_transfer_experiment_reading_first_stage(tmp_path, transfer_experiment):
    """--warmstart-reading-first N: a reading-only warm start (notes of several rules) saved as a model folder
    that the format warm start starts from; reused when present; negative values are refused (exit 2)."""
    from pathlib import Path

    from skillrise_gym.models import is_model_folder

    module = transfer_experiment
    p = module.Preset(rules=2, bins=4, K=2, warmstart_reading_first=2, warmstart_steps=0, warmstart_sequences=6,
                      warmstart_batch=4)
    start = module.untrained(p, tmp_path, print)
    assert start == str(tmp_path / "reading-first") and is_model_folder(start)
    stamp = (Path(start) / "config.json").stat().st_mtime_ns
    assert module.untrained(p, tmp_path, print) == start  # reused, not retrained
    assert (Path(start) / "config.json").stat().st_mtime_ns == stamp
    with pytest.raises(SystemExit) as exit_info:
        module.main(["--warmstart-reading-first", "-1", "--work-dir", str(tmp_path / "w")])
    assert exit_info.value.code == 2


def test_transfer_experiment_extends_a_finished_arm_only_when_asked(tmp_path, transfer_experiment):
    """An arm finished at 2 steps is reused at --steps 2, refused at --steps 3 (and 1) without --extend, and
    continued from its checkpoint to 3 with it: one record per step, the wall time summed, its earlier
    evaluations deleted so that the bench does not resume them for the new weights."""
    module = transfer_experiment
    work = tmp_path / "work"
    p = module.Preset(K=2, G=2, S=1, steps=2, warmstart_steps=0, threads=1)
    first = module.train_arm("skillrise", "tiny", p, work, print)
    assert [row["step"] for row in first["curve"]] == [1, 2]
    stale = work / "eval-bench" / "skillrise"
    stale.mkdir(parents=True)
    assert module.train_arm("skillrise", "tiny", p, work, print)["wall_seconds"] == first["wall_seconds"]  # reused
    assert stale.exists()
    for steps in (3, 1):
        with pytest.raises(SystemExit, match="trained for 2 steps") as refused:
            module.train_arm("skillrise", "tiny", module.replace(p, steps=steps), work, print)
        assert ("--extend" in str(refused.value)) == (steps == 3)
    with pytest.raises(SystemExit):  # fewer steps than trained: --extend cannot shorten a run
        module.train_arm("skillrise", "tiny", module.replace(p, steps=1), work, print, extend=True)
    longer = module.train_arm("skillrise", "tiny", module.replace(p, steps=3), work, print, extend=True)
    assert [row["step"] for row in longer["curve"]] == [1, 2, 3]
    assert longer["curve"][:2] == first["curve"] and longer["wall_seconds"] > first["wall_seconds"]
    assert not stale.exists() and module.trained_steps(work / "skillrise") == 3
    assert (work / "skillrise" / "checkpoint-2").is_dir()  # continued from it, not retrained from step 0


def test_transfer_experiment_passes_its_penalties_to_every_arm_and_refuses_bad_ones(tmp_path, monkeypatch, capsys,
                                                                                   transfer_experiment):
    """--invalid-penalty and --overlong-penalty reach each arm's TrainConfig (an open tag priced at least as a
    cut: README, "Training at K=5"); a negative or non-finite one is a one-line error (exit 2) before anything
    runs."""
    import sys
    from pathlib import Path

    import skillrise_train.cli

    module = transfer_experiment
    seen = []

    def fake_run(config):
        seen.append(config)
        Path(config.output_dir).mkdir(parents=True, exist_ok=True)
        (Path(config.output_dir) / "metrics.jsonl").write_text('{"rollout": 1, "success/mean": 0.5}\n')

    monkeypatch.setattr(skillrise_train.cli, "run", fake_run)
    p = module.Preset(K=2, G=2, S=1, steps=1, warmstart_steps=0, invalid_penalty=2.0, overlong_penalty=1.5)
    module.train_arm("own", "tiny", p, tmp_path / "work", print)
    assert (seen[0].invalid_penalty, seen[0].overlong_penalty, seen[0].curate_credit) == (2.0, 1.5, "own")
    assert module.Preset().invalid_penalty == 0.5  # the default every earlier run used
    for flag, value in (("--invalid-penalty", "-1"), ("--overlong-penalty", "nan"), ("--invalid-penalty", "inf")):
        with pytest.raises(SystemExit) as exited:
            module.main([flag, value, "--work-dir", str(tmp_path / "w"), "--results-dir", str(tmp_path / "r")])
        assert exited.value.code == 2
        assert "penalty must be a finite number >= 0" in capsys.readouterr().err
    assert not (tmp_path / "w").exists()  # refused before the work dir was made


def test_transfer_experiment_starts_every_arm_from_init_and_refuses_a_bad_one(tmp_path, monkeypatch, capsys,
                                                                              transfer_experiment):
    """--init DIR (a curriculum: R=2 arms trained from an arm trained at R=1) replaces the format warm start as
    every arm's start and is evaluated as the "init" row; a folder that is no model nor adapter, or --init with
    the lamer arm (which starts from its reflection warm start), is a one-line error (exit 2) before anything
    runs."""
    from types import SimpleNamespace

    module = transfer_experiment
    init = tmp_path / "r1" / "final"
    init.mkdir(parents=True)
    (init / "config.json").write_text("{}")
    starts, evaluated = [], []

    def no_warm_start(*_args, **_kwargs):
        raise AssertionError("the format warm start ran although --init was given")

    monkeypatch.setattr(module, "untrained", no_warm_start)
    monkeypatch.setattr(module, "evaluate", lambda name, model_dir, *a, **k: evaluated.append((name, model_dir)) or {})
    monkeypatch.setattr(module, "train_arm", lambda arm, start, *a, **k: starts.append((arm, start)) or {})
    p = module.Preset(rules=2, bins=4, init=str(init))
    args = SimpleNamespace(no_untrained=False, arms=["skillrise", "own"], extend=False)
    module.run_seed(p, tmp_path / "work", args, lambda _m: None, shared=tmp_path / "work")
    assert starts == [("skillrise", str(init)), ("own", str(init))]
    assert ("init", str(init)) in evaluated and not any(name == "untrained" for name, _ in evaluated)
    for argv, message in (
        (["--init", str(tmp_path / "r1")], "is not a model folder"),  # the run dir, not its final/
        (["--init", str(init), "--arms", "skillrise", "lamer"], "does not apply to the lamer arm"),
    ):
        with pytest.raises(SystemExit) as exited:
            module.main(argv + ["--work-dir", str(tmp_path / "w"), "--results-dir", str(tmp_path / "res")])
        assert exited.value.code == 2
        assert message in capsys.readouterr().err
    assert not (tmp_path / "w").exists()  # refused before the work dir was made


def test_transfer_experiment_warmstart_only_builds_the_warm_start_and_stops(tmp_path, monkeypatch, capsys,
                                                                            transfer_experiment):
    """--warmstart-only builds the warm start per seed in the work dir (each seed's folder with --seeds) and
    stops: no arm, no evaluation, no results folder. With --init, or with nothing to build, it is a one-line
    error (exit 2)."""
    module = transfer_experiment
    built = []
    monkeypatch.setattr(module, "untrained", lambda p, work, log: built.append((p.seed, work)) or str(work / "untrained"))

    def nothing_else(*_args, **_kwargs):
        raise AssertionError("--warmstart-only trained or evaluated something")

    monkeypatch.setattr(module, "train_arm", nothing_else)
    monkeypatch.setattr(module, "evaluate", nothing_else)
    work, results = tmp_path / "w", tmp_path / "res"
    assert module.main(["--warmstart-only", "--work-dir", str(work), "--results-dir", str(results)]) == 0
    assert built == [(0, work)] and not results.exists()
    assert "no arm trained, no results written" in capsys.readouterr().out
    built.clear()
    assert module.main(["--warmstart-only", "--seeds", "0", "1", "--work-dir", str(work),
                        "--results-dir", str(results)]) == 0
    assert built == [(0, work / "seed0"), (1, work / "seed1")] and not results.exists()
    init = tmp_path / "final"
    init.mkdir()
    (init / "config.json").write_text("{}")
    for argv, message in ((["--init", str(init)], "which --init replaces"),
                          (["--warmstart-steps", "0"], "nothing to build")):
        with pytest.raises(SystemExit) as exited:
            module.main(["--warmstart-only", *argv, "--work-dir", str(tmp_path / "w2")])
        assert exited.value.code == 2
        assert message in capsys.readouterr().err
    assert not (tmp_path / "w2").exists()


def test_transfer_experiment_help_explains_every_preset_flag(capsys, transfer_experiment):
    """Every Preset field has a help text, shown by --help with its CPU default (and the GPU preset's where it
    differs); a flag left out keeps the preset's value."""
    from dataclasses import fields

    module = transfer_experiment
    assert all(spec.metadata.get("help") for spec in fields(module.Preset))
    with pytest.raises(SystemExit) as exited:
        module.main(["--help"])
    assert exited.value.code == 0
    shown = " ".join(capsys.readouterr().out.split())
    assert "--init INIT a model folder" in shown and "(default: none)" in shown
    assert "RL steps per arm (default: 60; --scale: 300)" in shown


def test_documents_by_position_counts_repeated_clauses_and_refuses_a_folder_that_is_no_work_dir(tmp_path, capsys):
    """benchmarks/experiments/documents_by_position.py: a document stating one clause twice (case and spacing
    aside) counts in `repeats_a_clause`, a document of distinct clauses or an unclosed one does not double
    count; a folder without a SkillRise arm's turns is a one-line error (exit 2)."""
    from benchmarks.experiments import documents_by_position as module

    rows = [{"response": "<skill>and wood items go in the yellow bin; And wood items go in the  yellow bin</skill>"},
            {"response": "<skill>and wood items go in the yellow bin; and cork items go in the red bin</skill>"},
            {"response": "<skill>and cork items go in the red bin"},
            {"response": ""}]
    assert module.repeats_a_clause(rows) == 0.25
    assert module.repeats_a_clause([]) == 0.0
    with pytest.raises(SystemExit) as exited:
        module.main([str(tmp_path)])
    assert exited.value.code == 2
    assert "not a transfer_experiment work dir" in capsys.readouterr().err


def test_documents_by_position_reads_the_probe_and_the_evaluation_k_from_the_work_dir(tmp_path):
    """documents_by_position.py takes R, N from the SkillRise arm's config.json and K from its evaluation rows:
    an R=1, N=3 run evaluated at K=3 gives two curate positions, the first document stating its task's rule."""
    import json

    from benchmarks.experiments import documents_by_position as module
    from skillrise_gym.backends.rulebook import RulebookBackend

    test = RulebookBackend(rules=1, bins=3).list_tasks("test")
    tasks = [t for t in test if t.family == test[0].family][:3]
    rule = f"{tasks[0].payload['kind']} items go in the {tasks[0].payload['bin']} bin"
    rows = []
    for position, task in enumerate(tasks):
        base = {"trial_id": "t", "task_id": task.id, "position": position, "extra": {"K": 3}, "success": True}
        rows.append({**base, "role": "solve"})
        if position < 2:
            rows.append({**base, "role": "curate", "action": rule, "response": f"<skill>{rule}</skill>",
                         "completion_tokens": 9})
    work = tmp_path / "work"
    (work / "eval-bench" / "skillrise" / "carry-skill").mkdir(parents=True)
    (work / "skillrise").mkdir()
    (work / module.EVALUATION.format(arm="skillrise")).write_text("".join(json.dumps(r) + "\n" for r in rows))
    (work / module.TRAINING.format(arm="skillrise")).write_text(json.dumps({**rows[1], "extra": {"step": 0}}) + "\n")
    (work / module.CONFIG.format(arm="skillrise")).write_text(json.dumps({"backend_options": {"rules": 1, "bins": 3}}))
    summary = module.summarise(work)
    assert summary["probe"] == {"rules": 1, "bins": 3, "K": 3}
    first, _second = summary["evaluation_by_curate_position"]
    assert first["states_all"] == 1.0 and first["instance_words"] == 0.0
    assert summary["evaluation_curate"] == {"closed": 1.0, "cut": 0.0}
    # --arm grpo: a control that trains solve turns only (no curate turn among its training turns) still has
    # its held-out documents read; an arm the work dir lacks is a one-line error
    (work / "eval-bench" / "grpo" / "carry-skill").mkdir(parents=True)
    (work / "grpo").mkdir()
    bare = [{**r, "action": "items go in a bin", "response": "<skill>items go in a bin</skill>"}
            if r["role"] == "curate" else r for r in rows]
    (work / module.EVALUATION.format(arm="grpo")).write_text("".join(json.dumps(r) + "\n" for r in bare))
    (work / module.TRAINING.format(arm="grpo")).write_text(json.dumps({**rows[0], "extra": {"step": 0}}) + "\n")
    (work / module.CONFIG.format(arm="grpo")).write_text(json.dumps({"backend_options": {"rules": 1, "bins": 3}}))
    grpo = module.summarise(work, arm="grpo")
    assert grpo["arm"] == "grpo" and grpo["training_curate"] == []
    assert grpo["evaluation_by_curate_position"][0]["states_all"] == 0.0
    with pytest.raises(SystemExit) as exited:
        module.main([str(work), "--arm", "none"])
    assert exited.value.code == 2
    # evaluated with carry skill alone (`--eval-carry skill`), the arm's turns sit in its own folder
    flat = work / "eval-bench" / "grpo" / "turns.jsonl"
    (work / module.EVALUATION.format(arm="grpo")).rename(flat)
    (work / "eval-bench" / "grpo" / "carry-skill").rmdir()  # such a run has no carry-skill/ folder
    assert module.summarise(work, arm="grpo")["evaluation_by_curate_position"] == grpo["evaluation_by_curate_position"]


def test_paired_positions_differences_two_rows_on_one_panel_and_refuses_bad_input(tmp_path, capsys):
    """benchmarks/experiments/paired_positions.py: per sequence, the mean success at positions >= FROM of the
    arm minus the reference's, on the panel both played; rows played on different panels are refused naming
    both hashes; a missing row, an out-of-range position, rows without a sequence of that length or rows
    evaluated on another probe (their manifests) is a one-line error (exit 2)."""
    import json

    from benchmarks.experiments import paired_positions as module

    work = tmp_path / "work"
    arm = work / "eval-bench" / "skillrise" / "carry-skill"
    reference = work / "eval-bench" / "latest-rule-only"
    arm.mkdir(parents=True)
    reference.mkdir(parents=True)

    def write(folder, rows):
        (folder / "results.jsonl").write_text("".join(
            json.dumps({"K": 4, "index": i, "sequence_id": s, "task_ids": [f"{s}{p}" for p in range(4)], "success": v})
            + "\n" for i, (s, v) in enumerate(rows)))

    write(arm, [("a", [0, 1, 1, 1]), ("b", [1, 0, 1, 0]), ("only-arm", [1, 1, 1, 1])])
    write(reference, [("a", [1, 1, 0, 1]), ("b", [0, 0, 0, 0])])
    with pytest.raises(module.PanelMismatch, match=r"different panels \(panel hash [0-9a-f]{16} vs [0-9a-f]{16}\)"):
        module.paired(work, "skillrise", "latest-rule-only", K=4, start=2)
    write(arm, [("a", [0, 1, 1, 1]), ("b", [1, 0, 1, 0])])
    result = module.paired(work, "skillrise", "latest-rule-only", K=4, start=2)
    # a: 1.0 - 0.5, b: 0.5 - 0.0
    assert (result["sequences"], result["skillrise"], result["latest-rule-only"]) == (2, 0.75, 0.25)
    assert result["difference"] == 0.5
    assert result["ci"][0] <= 0.5 <= result["ci"][1]
    other = tmp_path / "other" / "eval-bench" / "own" / "carry-skill"  # a reference row from another work dir
    other.mkdir(parents=True)
    write(other, [("a", [1, 1, 0, 0]), ("b", [1, 1, 1, 1])])
    across = module.paired(work, "skillrise", "own", K=4, start=2, reference_work=tmp_path / "other")
    assert (across["sequences"], across["own"], across["difference"]) == (2, 0.5, 0.25)
    second = tmp_path / "seed1"  # another seed's run: its own sequences, pooled with the first run's
    for name, rows in (("skillrise/carry-skill", [("c", [0, 0, 1, 1])]), ("latest-rule-only", [("c", [0, 0, 0, 0])])):
        (second / "eval-bench" / name).mkdir(parents=True)
        write(second / "eval-bench" / name, rows)
    together = module.pooled([work, second], "skillrise", "latest-rule-only", K=4, start=2)
    # differences 0.5, 0.5 (first run) and 1.0 (second): one bootstrap over the three sequences
    assert (together["runs"], together["sequences"], together["difference"]) == (2, 3, round(2 / 3, 3))
    assert together["ci"][0] <= 2 / 3 <= together["ci"][1]
    for argv, message in (([str(work), "--reference", "perfect-curator"], "no held-out results for 'perfect-curator'"),
                          ([str(work), "--K", "4", "--from-position", "4"], "--from-position must be in 0..3"),
                          ([str(work), "--K", "6"], "played no sequence of length 6"),
                          ([str(work), "--reference", "own"], "no held-out results for 'own'"),
                          ([str(work), "--reference", "skillrise", "--reference-work", str(tmp_path / "none")],
                           "none holds no held-out results for 'skillrise'")):
        with pytest.raises(SystemExit) as exited:
            module.main(argv)
        assert exited.value.code == 2
        assert message in capsys.readouterr().err
    for folder, rules in ((arm, 2), (other, 1)):  # the same ids on another probe name other tasks
        (folder / "manifest.json").write_text(json.dumps({"identity": {"env": "rulebook", "backend_options":
                                                                        {"rules": rules, "bins": 4}}}))
    with pytest.raises(ValueError, match="evaluated on different probes"):
        module.paired(work, "skillrise", "own", K=4, start=2, reference_work=tmp_path / "other")
    # one run named twice (W and W/) would count its sequences twice in the pooled interval
    with pytest.raises(SystemExit) as exited:
        module.main([str(work), str(work) + "/", "--K", "4"])
    assert exited.value.code == 2 and "name the same work dir" in capsys.readouterr().err


def test_documents_by_position_refuses_empty_or_damaged_records_and_a_bad_budget(tmp_path, capsys):
    """documents_by_position.py: an empty evaluation, a damaged turn line or config and --budget below 1 are one
    line each (exit 2), never a traceback."""
    import json

    from benchmarks.experiments import documents_by_position as module

    work = tmp_path / "work"
    (work / "eval-bench" / "skillrise" / "carry-skill").mkdir(parents=True)
    (work / "skillrise").mkdir()
    (work / module.TRAINING.format(arm="skillrise")).write_text("")
    (work / module.CONFIG.format(arm="skillrise")).write_text(json.dumps({"backend_options": {"rules": 1, "bins": 3}}))
    evaluation = work / module.EVALUATION.format(arm="skillrise")
    for content, message in (("", "holds no turn"), ('{"role": "solve"}\nnot json\n{}\n', "cannot read")):
        evaluation.write_text(content)
        with pytest.raises(SystemExit) as exited:
            module.main([str(work)])
        assert exited.value.code == 2 and message in capsys.readouterr().err
    (work / module.CONFIG.format(arm="skillrise")).write_text("{damaged")
    with pytest.raises(SystemExit) as exited:
        module.main([str(work)])
    assert exited.value.code == 2 and "cannot read" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        module.main([str(work), "--budget", "-5"])
    assert exited.value.code == 2 and "--budget must be" in capsys.readouterr().err
