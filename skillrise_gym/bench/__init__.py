"""`skillrise-bench`: benchmark non-RL agents on K-task sequences (runner, metrics, plots, CLI)."""

from skillrise_gym.bench.runner import ENVS, BenchConfig, BenchOutcome, BenchRunner, run_bench

__all__ = ["ENVS", "BenchConfig", "BenchOutcome", "BenchRunner", "run_bench"]
