"""Documents as an artifact: every bench run's documents.jsonl, and replaying another run's (a transplant).

documents.jsonl (one line per curate turn of a finished sequence, written beside turns.jsonl whenever the run
writes its summary): ``{"version": 1, "K", "index", "sequence_id", "position", "text", "hash", "writer",
"carry"}``; `position` is the curate turn's (its document is what task position + 1 sees), `hash` the sha256
of the text (16 hex digits), `writer` the agent (or curator) that wrote it.

`Documents` reads such a file for `skillrise-bench --documents-from RUN`: each curate turn then answers with
RUN's document for the same sequence and position, so one run's documents are played by another agent on
the same sequences. A run folder is refused when what it measured differs from this run in a way that would
give other sequences (`check_source`, naming the first difference); a sequence or position RUN has no
document for ends the run with an error naming it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Iterable, Mapping

from skillrise_gym.agents.base import AgentError

NAME = "documents.jsonl"
VERSION = 1
#: what a source run must share with the run that replays its documents (its manifest's identity)
SAME_SEQUENCES = ("env", "split", "mode", "seed", "panel", "family", "backend_options", "max_task_steps")


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def document_lines(turns: Iterable[Mapping[str, Any]], default_writer: str) -> list[dict[str, Any]]:
    """documents.jsonl's lines for the curate turns among `turns` (records' dicts)."""
    lines = []
    for turn in turns:
        if turn.get("role") != "curate":
            continue
        extra = turn.get("extra") or {}
        agent = extra.get("agent") or {}
        writer = agent.get("writer")
        writer = (writer.get("model") or writer.get("name")) if isinstance(writer, dict) else writer
        text = str(turn.get("action") or "")
        lines.append({"version": VERSION, "K": extra.get("K"), "index": extra.get("index"),
                      "sequence_id": turn.get("sequence_id"), "position": turn.get("position"), "text": text,
                      "hash": text_hash(text), "writer": writer or default_writer,
                      "carry": extra.get("carry"), **({"memory": agent["memory"]} if agent.get("memory") else {})})
    return sorted(lines, key=lambda r: (r["K"] or 0, r["index"] or 0, r["position"] or 0))


def write_documents(folder: Path, finished: set[tuple[int, int]], default_writer: str) -> Path:
    """(Re)write folder/documents.jsonl from folder/turns.jsonl: the curate turns of the finished sequences
    ((K, index) pairs), atomically."""
    from skillrise_gym.records import iter_jsonl

    turns = folder / "turns.jsonl"
    rows = [t for t in iter_jsonl(turns) if ((t.get("extra") or {}).get("K"), (t.get("extra") or {}).get("index"))
            in finished] if turns.is_file() else []
    path = folder / NAME
    scratch = path.with_suffix(".jsonl.tmp")
    scratch.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n"
                               for line in document_lines(rows, default_writer)), encoding="utf-8")
    scratch.replace(path)
    return path


def documents_file(run: str | Path, carry: str | None = None) -> Path:
    """A run's documents.jsonl: RUN itself (a file), RUN/documents.jsonl, or RUN/carry-<mode>/documents.jsonl
    of its `carry` mode (else of its only mode that has one)."""
    path = Path(run).expanduser()
    if path.is_file():
        return path
    if (path / NAME).is_file():
        return path / NAME
    found = sorted(path.glob(f"carry-*/{NAME}"))
    if carry is not None and (path / f"carry-{carry}" / NAME).is_file():
        return path / f"carry-{carry}" / NAME
    if len(found) == 1:
        return found[0]
    if found:
        modes = ", ".join(p.parent.name.removeprefix("carry-") for p in found)
        raise ValueError(f"--documents-from {run}: it holds the documents of several memory modes ({modes}); "
                         f"name one: {path}/carry-<mode>")
    raise ValueError(f"--documents-from {run}: no {NAME} there (a bench run folder writes one with its summary)")


def check_source(source: Path, identity: Mapping[str, Any]) -> None:
    """Refuse a source run whose sequences differ from this run's (its manifest beside documents.jsonl, or
    one level up): ValueError naming the first field that differs."""
    for folder in (source.parent, source.parent.parent):
        manifest = folder / "manifest.json"
        if manifest.is_file():
            theirs = json.loads(manifest.read_text(encoding="utf-8")).get("identity") or {}
            for key in SAME_SEQUENCES:
                if key == "seed" and theirs.get("panel") is not None and theirs.get("panel") == identity.get("panel"):
                    continue  # a named panel draws the sequences whatever --seed is
                if theirs.get(key) != identity.get(key):
                    raise ValueError(f"--documents-from {source}: its run played other sequences: {key} "
                                     f"{theirs.get(key)!r} there, {identity.get(key)!r} here")
            return
    raise ValueError(f"--documents-from {source}: no manifest.json beside it, so its sequences cannot be checked")


class Documents:
    """Another run's documents by (K, sequence id, curate position)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.source = str(path)
        raw = path.read_bytes()
        self.digest = hashlib.sha256(raw).hexdigest()[:16]
        self.by_key: dict[tuple[int, str, int], str] = {}
        for number, line in enumerate(raw.decode("utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                if int(row.get("version", 1)) > VERSION:
                    raise ValueError(f"version {row['version']} is newer than this code reads ({VERSION})")
                self.by_key[(int(row["K"]), str(row["sequence_id"]), int(row["position"]))] = str(row["text"])
            except (ValueError, KeyError, TypeError) as exc:
                raise ValueError(f"{path}, line {number}: not a documents.jsonl line ({exc})") from None

    def text(self, K: int, sequence_id: str, position: int) -> str:
        try:
            return self.by_key[(int(K), sequence_id, int(position))]
        except KeyError:
            raise AgentError(f"--documents-from {self.source} has no document for sequence {sequence_id} (K={K}) "
                             f"at position {position}: that run did not finish it", resumable=False) from None
