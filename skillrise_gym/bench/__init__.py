"""`skillrise-bench`: benchmark non-RL agents on K-task sequences.

Modules: `runner` (`BenchConfig`, `BenchRunner`: N pinned sequences per K played on an env pool), `store`
(the run directory: manifest, turns, results; resumable), `metrics` (summaries with 95% CIs: Wilson score
intervals for rates of 0/1 outcomes, a bootstrap over sequences for other means), `plots` (the PNG plots),
`compare` (`skillrise-bench compare`: several runs in one table), `rescore` (`skillrise-bench rescore`:
results recomputed from the turns), `cli` (the console script).
"""

from skillrise_gym.bench.runner import ENVS, BenchConfig, BenchOutcome, BenchRunner, run_bench

__all__ = ["ENVS", "BenchConfig", "BenchOutcome", "BenchRunner", "run_bench"]
