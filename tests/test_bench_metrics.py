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
