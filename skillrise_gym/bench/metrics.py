"""Bench metrics from per-sequence results, with 95% confidence intervals.

The unit of a CI is the sequence (tasks of one sequence share a family and a skill document, so they are
not independent). All rates are fractions in [0, 1]. Every statistic is {"mean", "ci": [low, high],
"method"}, where "method" says how its CI was made:

- "wilson": a rate whose per-sequence values are all 0 or 1 (success or Pass@k at one position; overall
  success when K = 1, or when every sequence solved all or none of its tasks; a score at one position where
  scores are 0/1, as ALFWorld's): the Wilson score interval for that many successes out of n sequences.
  Unlike a bootstrap it is never zero-width: 20/20 is [0.839, 1], not [1, 1].
- "bootstrap": any other mean (overall success from fractional per-sequence means, scores, steps, seconds,
  paired differences): a seeded percentile bootstrap over the sequences.

Per K:
- success / score per task position, and overall (mean over every task of every sequence);
- repeat mode: Pass@k for k = 1..K = the fraction of sequences solved in at least one of the first k
  attempts (the reference's cumulative success_rate[k]);
- steps per task, invalid-format rate (agent calls whose answer lacked the expected tags), engine errors,
  tokens in and out, agent time and sequence wall time, between-task (curate/reflect) calls per sequence.

Carry modes (`carry_differences`, `carry_table`): every mode plays the same sequences, so the difference of a
mode from the reference mode (the first) is a paired one: per sequence, the difference of its mean success,
bootstrapped over the sequences finished in both.
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Any, Mapping, Sequence

import numpy as np

BOOTSTRAP_SAMPLES = 2000
CONFIDENCE = 0.95
#: how the summary's CIs are made (recorded in it as "ci_method"; each statistic also names its own)
CI_METHOD = ("wilson score interval for rates of 0/1 per-sequence outcomes (n = sequences); "
             "percentile bootstrap over sequences for other means")


def wilson_ci(successes: float, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The Wilson score interval of a binomial proportion, `successes` out of `n`; (nan, nan) when n = 0."""
    if n <= 0:
        return float("nan"), float("nan")
    z = NormalDist().inv_cdf(1 - (1 - confidence) / 2)
    p = successes / n
    z2n = z * z / n
    centre = (p + z2n / 2) / (1 + z2n)
    half = z * np.sqrt(p * (1 - p) / n + z2n / (4 * n)) / (1 + z2n)
    low = 0.0 if successes <= 0 else max(0.0, centre - half)
    high = 1.0 if successes >= n else min(1.0, centre + half)
    return float(low), float(high)


def _binary(values: np.ndarray) -> bool:
    return values.size > 0 and bool(np.all((values == 0) | (values == 1)))


def bootstrap_ci(values: np.ndarray, seed: int = 0, samples: int = BOOTSTRAP_SAMPLES,
                 confidence: float = CONFIDENCE) -> np.ndarray:
    """Percentile CIs of the mean over rows (sequences) of `values` (shape (n,) or (n, m)); rows resampled
    with replacement. Returns shape (2,) or (2, m)."""
    values = np.asarray(values, dtype=float)
    n = values.shape[0]
    if n == 0:
        return np.full((2,) + values.shape[1:], np.nan)
    if n == 1:
        return np.stack([values[0], values[0]])
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, n, size=(samples, n))
    means = values[picks].mean(axis=1)
    alpha = (1 - confidence) / 2
    return np.quantile(means, [alpha, 1 - alpha], axis=0)


def t_quantile(p: float, df: int) -> float:
    """Student's t quantile at `p` (0.5 <= p < 1) with `df` (a positive integer) degrees of freedom, exact to
    float rounding: P(|T| <= t) in closed form for integer df (Abramowitz & Stegun 26.7.3-4, in the angle
    atan(t / sqrt(df))), inverted by bisection. For intervals over a handful of runs, where the normal 1.96 is
    far too narrow (12.706 at df 1)."""
    if not 0.5 <= p < 1 or int(df) != df or df < 1:
        raise ValueError(f"t_quantile needs 0.5 <= p < 1 and a positive integer df, not p={p}, df={df}")
    df = int(df)

    def inside(t: float) -> float:  # P(|T| <= t)
        theta = math.atan(t / math.sqrt(df))
        s, c = math.sin(theta), math.cos(theta)
        if df % 2:  # odd: (2/pi) (theta + sin cos (1 + 2/3 cos^2 + 2*4/(3*5) cos^4 + ...)), cos^(df-2) last
            term, total = c, 0.0
            for k in range((df - 1) // 2):
                total += term
                term *= c * c * (2 * k + 2) / (2 * k + 3)
            return 2 / math.pi * (theta + s * total)
        term, total = 1.0, 0.0  # even: sin (1 + 1/2 cos^2 + 1*3/(2*4) cos^4 + ...), cos^(df-2) last
        for k in range(df // 2):
            total += term
            term *= c * c * (2 * k + 1) / (2 * k + 2)
        return s * total

    target, low, high = 2 * p - 1, 0.0, 1.0
    while inside(high) < target:
        high *= 2
    for _ in range(200):
        mid = (low + high) / 2
        low, high = (mid, high) if inside(mid) < target else (low, mid)
        if high - low <= 1e-12 * high:
            break
    return (low + high) / 2


def _stat(values: np.ndarray, seed: int) -> dict[str, Any]:
    """Mean and percentile-bootstrap CI over sequences: scores, steps, seconds, paired differences, and success
    rates whose per-sequence values are not all 0 or 1 (`_rate`)."""
    low, high = bootstrap_ci(values, seed)
    return {"mean": float(np.mean(values)), "ci": [float(low), float(high)], "method": "bootstrap"}


def _rate(values: np.ndarray, seed: int) -> dict[str, Any]:
    """Mean and CI of a success rate over sequences (one value in [0, 1] per sequence): Wilson when every
    value is 0 or 1, else the bootstrap."""
    values = np.asarray(values, dtype=float)
    if not _binary(values):
        return _stat(values, seed)
    low, high = wilson_ci(float(values.sum()), len(values))
    return {"mean": float(values.mean()), "ci": [low, high], "method": "wilson"}


def _per_position(values: np.ndarray, seed: int) -> list[dict[str, Any]]:
    """`_rate` of each column (position or attempt) of a (sequences, positions) array: Wilson for a column of
    0/1 values (success, Pass@k, 0/1 scores), else the bootstrap."""
    return [_rate(column, seed) for column in np.asarray(values, dtype=float).T]


def summarize_block(results: Sequence[Mapping[str, Any]], K: int, mode: str, seed: int = 0,
                    prices: tuple[float, float] | None = None) -> dict[str, Any]:
    """Metrics of the finished sequences of one K (results as written by the runner)."""
    results = sorted(results, key=lambda r: r["index"])
    n = len(results)
    block: dict[str, Any] = {"K": K, "mode": mode, "sequences": n}
    if n == 0:
        return block
    success = np.array([[float(s) for s in r["success"]] for r in results])
    score = np.array([[float(s) for s in r["score"]] for r in results])
    steps = np.array([[float(s) for s in r["steps"]] for r in results])
    calls = sum(r["calls"] for r in results)
    invalid = sum(r["invalid_format"] for r in results)
    solve_calls = sum(r.get("solve_calls", 0) for r in results)
    curate_calls = sum(r.get("curate_calls", 0) for r in results)
    invalid_solve = sum(r.get("invalid_format_solve", 0) for r in results)
    block.update(
        success=_rate(success.mean(axis=1), seed),
        score=_stat(score.mean(axis=1), seed),
        success_by_position=_per_position(success, seed),
        score_by_position=_per_position(score, seed),
        steps_per_task=_stat(steps.mean(axis=1), seed),
        steps_per_solved_task=float(steps[success > 0].mean()) if success.any() else None,
        agent_calls=int(calls),
        curate_calls_per_sequence=curate_calls / n,
        invalid_format_rate=invalid / calls if calls else 0.0,
        invalid_format_rate_solve=invalid_solve / solve_calls if solve_calls else 0.0,
        engine_errors=int(sum(sum(1 for e in r["engine_errors"] if e) for r in results)),
        prompt_tokens=int(sum(r["prompt_tokens"] for r in results)),
        completion_tokens=int(sum(r["completion_tokens"] for r in results)),
        agent_seconds=float(sum(r["agent_s"] for r in results)),
        sequence_wall_seconds=_stat(np.array([r["wall_s"] for r in results]), seed),
        # what each sequence's own model calls took (wall time is shared by the sequences played in lockstep)
        sequence_agent_seconds=_stat(np.array([r["agent_s"] for r in results]), seed),
        families=sorted({r["family"] for r in results}),
        cost=cost(results, prices),
    )
    if mode == "repeat":
        solved_by = np.maximum.accumulate(success, axis=1)  # solved in any attempt so far
        block["pass_at_k"] = {str(k + 1): item for k, item in enumerate(_per_position(solved_by, seed))}
    return block


def model_calls(turn: Any) -> int:
    """The model calls one turn made: a memory method's calls (recorded in its ``extra["agent"]["calls"]``),
    else one when the turn counted tokens (a model answered), else none (a scripted agent)."""
    calls = ((turn.extra or {}).get("agent") or {}).get("calls")
    if isinstance(calls, list):
        return len(calls)
    return int(bool(turn.prompt_tokens or turn.completion_tokens))


def cost_fields(turns: Sequence[Any]) -> dict[str, Any]:
    """A sequence's result fields for cost (from its `Turn`s): model calls in all, and the curate turns'
    share of calls, tokens and agent seconds (documents written between tasks)."""
    curate = [t for t in turns if t.role == "curate"]
    return {"model_calls": sum(model_calls(t) for t in turns),
            "curate_model_calls": sum(model_calls(t) for t in curate),
            "curate_prompt_tokens": sum(t.prompt_tokens for t in curate),
            "curate_completion_tokens": sum(t.completion_tokens for t in curate),
            "curate_agent_s": round(sum(float((t.extra or {}).get("latency_s") or 0.0) for t in curate), 4)}


def cost(results: Sequence[Mapping[str, Any]], prices: tuple[float, float] | None = None) -> dict[str, Any]:
    """What a block's sequences cost: prompt and completion tokens, model calls and agent seconds, in total,
    per task and per solved task, with the curate turns' share; with `prices` (dollars per million prompt and
    completion tokens), dollars too. Runs recorded before calls were counted report None where unknown."""
    tasks = sum(len(r["success"]) for r in results)
    solved = sum(sum(bool(x) for x in r["success"]) for r in results)

    def total(key: str) -> float | None:
        values = [r.get(key) for r in results]
        return None if any(v is None for v in values) else float(sum(values))

    whole = {"prompt_tokens": total("prompt_tokens"), "completion_tokens": total("completion_tokens"),
             "model_calls": total("model_calls"), "agent_seconds": total("agent_s")}
    curate = {"prompt_tokens": total("curate_prompt_tokens"), "completion_tokens": total("curate_completion_tokens"),
              "model_calls": total("curate_model_calls"), "agent_seconds": total("curate_agent_s")}
    if prices is not None:
        for part in (whole, curate):
            if part["prompt_tokens"] is not None and part["completion_tokens"] is not None:
                part["dollars"] = (part["prompt_tokens"] * prices[0] + part["completion_tokens"] * prices[1]) / 1e6

    def per(part: dict[str, Any], n: int) -> dict[str, Any]:
        return {k: (None if v is None or not n else v / n) for k, v in part.items()}

    return {"total": whole, "per_task": per(whole, tasks), "per_solved_task": per(whole, solved),
            "curate": curate, "curate_per_task": per(curate, tasks), "tasks": tasks, "solved_tasks": solved,
            **({"prices_per_million": {"prompt": prices[0], "completion": prices[1]}} if prices else {})}


def summarize(results: Sequence[Mapping[str, Any]], Ks: Sequence[int], mode: str, seed: int = 0,
              prices: tuple[float, float] | None = None) -> dict[str, Any]:
    """Metrics per K, plus the success-versus-K curve."""
    blocks = [summarize_block([r for r in results if r["K"] == K], K, mode, seed, prices) for K in Ks]
    return {
        "mode": mode,
        "confidence": CONFIDENCE,
        "ci_method": CI_METHOD,
        "bootstrap_samples": BOOTSTRAP_SAMPLES,
        "blocks": blocks,
        "success_vs_K": [
            {"K": b["K"], **b["success"]} for b in blocks if b["sequences"]
        ],
    }


def paired_difference(results: Sequence[Mapping[str, Any]], reference: Sequence[Mapping[str, Any]],
                      seed: int = 0) -> dict[str, Any]:
    """Mean success of `results` minus that of `reference` (one K), over the sequences (draw indices) finished
    in both, with a bootstrap CI of the per-sequence differences."""
    mine = {r["index"]: r for r in results}
    theirs = {r["index"]: r for r in reference}
    common = sorted(set(mine) & set(theirs))
    if not common:
        return {"sequences": 0}
    diffs = np.array([np.mean(np.asarray(mine[i]["success"], float)) - np.mean(np.asarray(theirs[i]["success"], float))
                      for i in common])
    return {"sequences": len(common), **_stat(diffs, seed)}


def carry_differences(results: Mapping[str, Sequence[Mapping[str, Any]]], Ks: Sequence[int], reference: str,
                      seed: int = 0) -> dict[str, Any]:
    """Per carry mode other than `reference`, per K: `paired_difference` against the reference mode."""
    base = results.get(reference, [])
    out: dict[str, Any] = {"reference": reference, "by_carry": {}}
    for mode, rows in results.items():
        if mode == reference:
            continue
        out["by_carry"][mode] = [
            {"K": K, **paired_difference([r for r in rows if r["K"] == K], [r for r in base if r["K"] == K], seed)}
            for K in Ks
        ]
    return out


def _fmt(stat: Mapping[str, Any] | None, digits: int = 2) -> str:
    if not stat:
        return "-"
    low, high = stat["ci"]
    return f"{stat['mean']:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def _fmt_signed(stat: Mapping[str, Any], digits: int = 2) -> str:
    low, high = stat["ci"]
    return f"{stat['mean']:+.{digits}f} [{low:+.{digits}f}, {high:+.{digits}f}]"


def markdown_table(summary: Mapping[str, Any], title: str | None = None) -> str:
    """A Markdown table, one row per K."""
    repeat = summary["mode"] == "repeat"
    header = ["K", "seqs", "success [95% CI]", "success by position", "score"]
    if repeat:
        header.append("Pass@k (k=1..K)")
    header += ["steps/task", "invalid fmt", "tokens in/out", "engine err", "agent s/seq"]
    lines = [f"### {title}", ""] if title else []
    lines += ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for b in summary["blocks"]:
        if not b["sequences"]:
            lines.append("| " + " | ".join([str(b["K"]), "0"] + ["-"] * (len(header) - 2)) + " |")
            continue
        row = [
            str(b["K"]), str(b["sequences"]), _fmt(b["success"]),
            " / ".join(f"{p['mean']:.2f}" for p in b["success_by_position"]),
            f"{b['score']['mean']:.2f}",
        ]
        if repeat:
            row.append(" / ".join(f"{p['mean']:.2f}" for p in b["pass_at_k"].values()))
        row += [
            f"{b['steps_per_task']['mean']:.1f}", f"{b['invalid_format_rate']:.1%}",
            f"{b['prompt_tokens']}/{b['completion_tokens']}", str(b["engine_errors"]),
            f"{b['sequence_agent_seconds']['mean']:.1f}",
        ]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def carry_table(summary: Mapping[str, Any], title: str | None = None) -> str:
    """A Markdown table of several carry modes, one row per (K, carry mode), modes of one K together; with
    more than one mode, the paired success difference from the reference (first) mode."""
    repeat = summary["mode"] == "repeat"
    modes = list(summary["by_carry"])
    difference = summary.get("difference", {})
    reference = difference.get("reference", modes[0] if modes else None)
    header = ["K", "carry", "seqs", "success [95% CI]"]
    if len(modes) > 1:
        header.append(f"vs {reference} [95% CI]")
    header += ["success by position", "score"]
    if repeat:
        header.append("Pass@k (k=1..K)")
    header += ["between-task calls/seq", "steps/task", "invalid fmt", "tokens in/out", "engine err", "agent s/seq"]
    lines = [f"### {title}", ""] if title else []
    lines += ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for K in summary["K"]:
        for mode in modes:
            block = next((b for b in summary["by_carry"][mode]["blocks"] if b["K"] == K), None)
            if not block or not block["sequences"]:
                lines.append("| " + " | ".join([str(K), mode, "0"] + ["-"] * (len(header) - 3)) + " |")
                continue
            row = [str(K), mode, str(block["sequences"]), _fmt(block["success"])]
            if len(modes) > 1:
                if mode == reference:
                    row.append("-")
                else:
                    item = next((d for d in difference.get("by_carry", {}).get(mode, []) if d["K"] == K), None)
                    row.append(_fmt_signed(item) if item and item.get("sequences") else "-")
            row += [" / ".join(f"{p['mean']:.2f}" for p in block["success_by_position"]), f"{block['score']['mean']:.2f}"]
            if repeat:
                row.append(" / ".join(f"{p['mean']:.2f}" for p in block["pass_at_k"].values()))
            row += [
                f"{block['curate_calls_per_sequence']:.1f}", f"{block['steps_per_task']['mean']:.1f}",
                f"{block['invalid_format_rate']:.1%}", f"{block['prompt_tokens']}/{block['completion_tokens']}",
                str(block["engine_errors"]), f"{block['sequence_agent_seconds']['mean']:.1f}",
            ]
            lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"
