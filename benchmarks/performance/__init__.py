"""Performance: what the trainer, the rollout and the bench cost. bench_parallel (skillrise-bench sequences per
minute with 1 vs 2 env workers), cpu_generation (CPU generation of SmolLM2-135M by threads and dtype), gpu_check
(GPU smoke check: generation and update throughput, one training step per env and algorithm), main_job (the
quickstart's step, generation and update, by CPU setting), rollout_throughput (trials per minute of the rollout by
env pool and size) and trainer_throughput (the update against stock TRL's on the same rows). Results:
benchmarks/results/<name>.json.
"""
