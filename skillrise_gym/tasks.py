"""The `Task`: one playable unit of a benchmark (an ALFWorld game, a WebShop goal, a ScienceWorld variation)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Mapping


@dataclass(frozen=True)
class Task:
    """One task of a benchmark.

    Identity is (benchmark, split, id): two `Task`s with those equal compare and hash equal, whatever
    their payload. `payload` holds what the backend needs to load the task (a game path, a goal index,
    a task name and variation); it must be JSON-serialisable.
    """

    benchmark: str
    id: str
    family: str
    difficulty: float
    split: str
    payload: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "benchmark": self.benchmark,
            "id": self.id,
            "family": self.family,
            "difficulty": self.difficulty,
            "split": self.split,
            "payload": dict(self.payload),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Task":
        missing = {"benchmark", "id", "family", "difficulty", "split"} - set(data)
        if missing:
            raise ValueError(f"task record is missing field(s) {sorted(missing)}: {dict(data)!r:.200}")
        return cls(
            benchmark=str(data["benchmark"]),
            id=str(data["id"]),
            family=str(data["family"]),
            difficulty=float(data["difficulty"]),
            split=str(data["split"]),
            payload=dict(data.get("payload") or {}),
        )

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "Task":
        return cls.from_dict(json.loads(text))
