"""Measurements of skillrise-gym and skillrise-train, by kind: `performance` (what the trainer, the rollout and
the bench cost: throughput, memory, the GPU check), `parity` (the environment engines against the stock engines
and the reference implementations they replace, and their own costs) and `experiments` (research experiments:
the transfer probe, the decisive experiment and the analyses of their runs). Every script runs as a file
(`python benchmarks/<kind>/<name>.py`) or as a module (`python -m benchmarks.<kind>.<name>`) from the repo root;
`--help` says what it measures and where its JSON goes. Committed results live in benchmarks/results/, recorded
inputs in benchmarks/data/.
"""
