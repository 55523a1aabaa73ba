"""One record schema for every model call (a "turn"), shared by the bench and the trainer, with JSONL I/O.

A turn is one SOLVE or CURATE call of an agent inside one trial of one sequence. A recorded run can be
re-scored (the bench's metrics) or trained on (the trainer's credit assignment) from these files alone.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

from skillrise_gym.prompts import ROLES

SCHEMA_VERSION = 1


@dataclass
class Turn:
    """One agent call and what the environment made of it."""

    role: str  # "solve" or "curate"
    position: int  # task position in the sequence, 0-based; for curate: the task just finished
    sequence_id: str
    trial_id: str  # one id per independent play-through of a sequence (the G trials of a group differ)
    task_id: str
    family: str
    benchmark: str
    prompt: str
    response: str
    action: str  # parsed command (solve) or parsed skill document (curate)
    format_valid: bool  # the response had the expected <action>/<skill> tags
    reward: float  # the env's reward for this step (solve: 1.0 on the succeeding step; curate: 0)
    success: bool  # the task at `position` was solved (known once it ended; False while running)
    score: float  # the engine's raw score after this step
    step_index: int  # 0-based index of the step within its task (solve); 0 (curate)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    task_done: bool = False  # this solve step ended the task
    engine_error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    schema: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"role must be one of {ROLES}, got {self.role!r}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Turn":
        known = {f.name for f in fields(cls)}
        schema = data.get("schema", SCHEMA_VERSION)
        if schema > SCHEMA_VERSION:
            raise ValueError(f"turn record has schema {schema}, newer than this library's {SCHEMA_VERSION}")
        unknown = set(data) - known
        extra = dict(data.get("extra") or {})
        extra.update({k: data[k] for k in unknown})  # keep fields from other tools instead of dropping them
        return cls(**{k: v for k, v in data.items() if k in known and k != "extra"}, extra=extra)


def turn_from_step(
    *,
    prompt: str,
    response: str,
    reward: float,
    info: Mapping[str, Any],
    sequence_id: str,
    trial_id: str,
    benchmark: str,
    prompt_tokens: int = 0,
    completion_tokens: int = 0,
    position_offset: int = 0,
    extra: Mapping[str, Any] | None = None,
) -> Turn:
    """The one way a `Turn` is made: from what an agent was asked (`prompt`), what it answered (`response`)
    and what `SequenceEnv.step` returned for it (`reward`, `info`). The bench runner and the trainer's
    rollout both call this, so their records agree field for field.

    `position_offset` places a single-task episode inside its sequence (the GRPO baseline plays task j of a
    sequence as a K=1 episode: offset j). `extra` holds the caller's own context (K and index for the
    bench, step and group for the trainer); the env's ``invalid_action`` reason is added to it.
    """
    role = info["role"]
    extra = dict(extra or {})
    if info.get("invalid_action"):
        extra["invalid_action"] = info["invalid_action"]
    return Turn(
        role=role,
        position=int(position_offset) + int(info["position"]),
        sequence_id=sequence_id,
        trial_id=trial_id,
        task_id=info["task_id"],
        family=info["family"],
        benchmark=benchmark,
        prompt=str(prompt),
        response=response,
        action=str(info["action"]),
        format_valid=bool(info["format_valid"]),
        reward=float(reward),
        success=bool(info["success"]),
        score=float(info["score"]),
        # the env counts a task's steps so far (1 after its first); records index them from 0
        step_index=int(info["step_index"]) - 1 if role == "solve" else 0,
        prompt_tokens=int(prompt_tokens),
        completion_tokens=int(completion_tokens),
        task_done=bool(info.get("task_done")),
        engine_error=info.get("engine_error"),
        extra=extra,
    )


def json_line(data: Any) -> str:
    """One JSON line (with its newline), always encodable as UTF-8: readable text stays as it is, and a
    string that holds a lone surrogate (a broken reply, an engine's bytes) is written with JSON escapes
    instead, which read back to the same string."""
    text = json.dumps(data, ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(data, ensure_ascii=True)
    return text + "\n"


def write_jsonl(path: str | os.PathLike, records: Iterable[Turn | dict], append: bool = True) -> int:
    """Write records one JSON object a line; flushes and fsyncs so a killed process loses nothing written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with open(path, "a" if append else "w", encoding="utf-8") as handle:
        for record in records:
            data = record.to_dict() if isinstance(record, Turn) else record
            handle.write(json_line(data))
            count += 1
        handle.flush()
        os.fsync(handle.fileno())
    return count


def iter_jsonl(path: str | os.PathLike) -> Iterator[dict[str, Any]]:
    """Yield the JSON objects of a JSONL file; a torn last line (a killed writer) is skipped, any other bad
    line (also one nested too deeply to parse) raises ValueError with its line number."""
    with open(path, encoding="utf-8") as handle:
        lines = handle.readlines()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as exc:
            if number == len(lines) and not line.endswith("\n"):
                return  # an interrupted final write
            reason = exc.msg if isinstance(exc, json.JSONDecodeError) else "nested too deeply"
            raise ValueError(f"{path}:{number}: not valid JSON ({reason})") from None
        yield data


def read_turns(path: str | os.PathLike) -> list[Turn]:
    return [Turn.from_dict(d) for d in iter_jsonl(path)]
