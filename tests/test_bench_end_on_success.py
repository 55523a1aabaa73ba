"""--end-on-success: a sequence that ends at its first solved task has positions it never played; its result
line records them as not solved (the same as rescoring its turns), so summaries and Pass@k read whole rows."""

from __future__ import annotations

import json

from skillrise_gym.agents.expert import ExpertAgent
from skillrise_gym.bench.rescore import rescore_run
from skillrise_gym.bench.runner import BenchConfig, run_bench


def test_positions_after_an_early_end_are_recorded_as_not_played(tmp_path):
    out = tmp_path / "run"
    outcome = run_bench(BenchConfig(env="rulebook", out=str(out), K=[3], mode="repeat", num_sequences=4,
                                    end_on_success=True, workers=0, progress=False, plots=False), ExpertAgent())
    assert outcome.status == "complete"
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert all(r["success"] == [True, False, False] and r["steps"][1:] == [0, 0] for r in rows)
    block = outcome.summary["blocks"][0]
    assert [p["mean"] for p in block["pass_at_k"].values()] == [1.0, 1.0, 1.0]
    assert rescore_run(out)["differences"] == []  # rescoring the turns gives the same lines
