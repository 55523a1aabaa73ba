"""Checkpoints that are known to be complete, and records that agree with the checkpoint a run resumes from.

The trainer (transformers' `Trainer`) writes `checkpoint-N/` file by file, so a kill while saving leaves a
folder that looks like a checkpoint: empty, or with a truncated optimizer or adapter. After every save,
`CompletionMarker` writes `checkpoint-N/skillrise-complete.json` (the size of every file in it) atomically;
`--resume` takes the newest checkpoint whose marker is there and whose files still have those sizes, and
says which newer ones it skipped and why.

Records are written as a run goes (turns.jsonl when a rollout is played, metrics.jsonl and eval.jsonl when
a step is logged), so after a kill they can run ahead of the newest complete checkpoint; a resumed run
replays those steps. `trim_records` first drops every record of a step the checkpoint does not hold, so
each step's records appear once, whatever the moment of the kill.

The output folder holds one run: `lock_output_dir` keeps a second trainer out of it while one runs (the
bench's lock, `skillrise_gym.bench.store`), `run_contents` says whether it holds a run (which then needs
--resume, or --overwrite: `clear_run`), and `rotate` enforces `save_total_limit` only among complete
checkpoints, after the new one is marked (transformers would delete the older ones before the marker is
written, so a kill in between could leave no complete checkpoint at all).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

from skillrise_gym.backends.base import SkillRiseError
from skillrise_gym.paths import atomic_write

MARKER = "skillrise-complete.json"
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
#: the records of a run (a folder holding one of them, a checkpoint-N or final/ holds a run)
RECORDS = ("metrics.jsonl", "turns.jsonl", "eval.jsonl")
#: everything else the trainer writes in its output folder; --overwrite deletes these, the records and the
#: checkpoint-N folders, and nothing else (runs/ is TensorBoard's default logging folder under report_to)
OUTPUTS = ("config.json", "final", "final-merged", "final-merged.tmp", "eval", "warmstart.json", "README.md", "runs")
#: the GRPOConfig attribute that carries trl_options' save_total_limit to `completion_callback` (TRL's own
#: save_total_limit stays None: see the module docstring)
SAVE_LIMIT_ATTRIBUTE = "skillrise_save_total_limit"


class RunFolderError(SkillRiseError, ValueError):
    """The output folder cannot be used as asked (another trainer holds it, it holds a run and neither
    --resume nor --overwrite was given, ...); the message says what to do."""


def lock_output_dir(out: str | os.PathLike) -> Any:
    """Hold `out`'s lock file (the bench's, `skillrise_gym.bench.store`) until the returned handle is closed;
    a folder another process holds is a `RunFolderError`."""
    from skillrise_gym.bench.store import RunDirError, _lock

    try:
        return _lock(Path(out))
    except RunDirError:
        raise RunFolderError(f"another skillrise-train process is writing to --output-dir {out} (it holds "
                             f"{Path(out) / '.lock'}); wait for it to end or choose another --output-dir") from None


def run_contents(out: str | os.PathLike) -> list[str]:
    """What in `out` shows that it holds a run (records, checkpoint-N folders, final/), sorted; [] when none."""
    out = Path(out)
    if not out.is_dir():
        return []
    found = [name for name in RECORDS + ("final",) if (out / name).exists()]
    return sorted(found + [folder.name for _step, folder in checkpoints(out)])


def clear_run(out: str | os.PathLike) -> list[str]:
    """Delete the run in `out`: its records, checkpoint-N folders and other outputs (`OUTPUTS`), nothing
    else; checkpoints go first, each losing its completion marker before its files. Returns what went."""
    out = Path(out)
    removed = []
    for _step, folder in checkpoints(out):
        _remove_checkpoint(folder)
        removed.append(folder.name)
    for name in RECORDS + OUTPUTS:
        path = out / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()
        else:
            continue
        removed.append(name)
    return removed


def _remove_checkpoint(folder: Path) -> None:
    """Delete a checkpoint folder, its marker first: a kill halfway leaves a folder that is not complete."""
    (folder / MARKER).unlink(missing_ok=True)
    shutil.rmtree(folder)


def rotate(out: str | os.PathLike, keep: int) -> list[Path]:
    """`save_total_limit` done safely: keep the `keep` newest complete checkpoints and delete every checkpoint
    folder older than the oldest of them (an incomplete one among them stays; resume skips it). Returns
    the folders deleted."""
    if keep < 1:
        raise ValueError(f"keep must be at least 1, got {keep}")
    complete = [(step, folder) for step, folder in checkpoints(out) if check_complete(folder) is None]
    if len(complete) <= keep:
        return []
    oldest_kept = complete[keep - 1][0]
    removed = []
    for step, folder in checkpoints(out):
        if step < oldest_kept:
            _remove_checkpoint(folder)
            removed.append(folder)
    return removed


def mark_complete(folder: str | os.PathLike, global_step: int) -> Path:
    """Write `folder`'s completion marker: the global step and every file's size (after fsyncing them)."""
    folder = Path(folder)
    files: dict[str, int] = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file() and path.name != MARKER and not path.name.startswith("."):
            with open(path, "rb") as handle:
                os.fsync(handle.fileno())
            files[str(path.relative_to(folder))] = path.stat().st_size
    marker = folder / MARKER
    atomic_write(marker, json.dumps({"global_step": int(global_step), "files": files}, indent=1), fsync=True)
    return marker


def check_complete(folder: str | os.PathLike) -> str | None:
    """None when `folder` is a complete checkpoint, else why not (for the message)."""
    folder = Path(folder)
    marker = folder / MARKER
    if not marker.is_file():
        return "no completion marker (killed while saving, or saved by an older version)"
    try:
        files = json.loads(marker.read_text(encoding="utf-8"))["files"]
    except (ValueError, KeyError, TypeError, OSError):
        return "its completion marker is unreadable"
    if not files:
        return "it holds no files"
    for name, size in files.items():
        path = folder / name
        if not path.is_file():
            return f"{name} is missing"
        if path.stat().st_size != size:
            return f"{name} has {path.stat().st_size} bytes, not the {size} it was saved with"
    return None


def checkpoints(out: str | os.PathLike) -> list[tuple[int, Path]]:
    """Every `checkpoint-N` folder in `out`, newest (largest N) first."""
    out = Path(out)
    if not out.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in out.iterdir() if p.is_dir() and (m := _CHECKPOINT.match(p.name))]
    return sorted(found, reverse=True)


def latest_complete(out: str | os.PathLike) -> tuple[Path | None, list[tuple[Path, str]]]:
    """The newest complete checkpoint in `out` (or None) and the newer ones skipped, each with its reason."""
    skipped: list[tuple[Path, str]] = []
    for _step, folder in checkpoints(out):
        reason = check_complete(folder)
        if reason is None:
            return folder, skipped
        skipped.append((folder, reason))
    return None, skipped


def checkpoint_step(folder: str | os.PathLike) -> int:
    """The global step a checkpoint holds (its trainer_state.json, else its name)."""
    folder = Path(folder)
    try:
        return int(json.loads((folder / "trainer_state.json").read_text(encoding="utf-8"))["global_step"])
    except (OSError, ValueError, KeyError, TypeError):
        match = _CHECKPOINT.match(folder.name)
        if match is None:
            raise ValueError(f"{folder} is not a checkpoint-N folder") from None
        return int(match.group(1))


def trim_records(out: str | os.PathLike, global_step: int, updates_per_rollout: int) -> dict[str, int]:
    """Drop the records of steps after `global_step` (the checkpoint a run resumes from) from
    turns.jsonl (turns of rollouts >= global_step // updates), metrics.jsonl (steps > global_step) and
    eval.jsonl (rollouts > global_step // updates), and a torn last line. Returns lines dropped per file."""
    out = Path(out)
    rollouts = int(global_step) // max(1, int(updates_per_rollout))
    keep = {
        "turns.jsonl": lambda r: int((r.get("extra") or {}).get("step", r.get("step", 0))) < rollouts,
        "metrics.jsonl": lambda r: int(r.get("step", 0)) <= global_step,
        "eval.jsonl": lambda r: int(r.get("step", 0)) <= rollouts,
    }
    dropped: dict[str, int] = {}
    for name, wanted in keep.items():
        path = out / name
        if not path.is_file():
            continue
        lines = [line for line in path.read_text(encoding="utf-8").splitlines(keepends=True) if line.strip()]
        kept = []
        for number, line in enumerate(lines, 1):
            if not line.endswith("\n"):
                continue  # an interrupted final write
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{number}: not valid JSON ({exc.msg})") from None
            if wanted(record):
                kept.append(line)
        if len(kept) != len(lines):
            atomic_write(path, "".join(kept), fsync=True)
        dropped[name] = len(lines) - len(kept)
    # the bench run folders of later evaluations too: a rerun of that evaluation would resume them
    stale = [p for p in (out / "eval").glob("step-*") if p.is_dir() and p.name[5:].isdigit() and int(p.name[5:]) > rollouts]
    for folder in stale:
        shutil.rmtree(folder)
    if stale:
        dropped["eval/step-N folders"] = len(stale)
    return dropped


def completion_callback() -> Any:
    """A `TrainerCallback` that marks each checkpoint complete once the trainer has written all of it, then
    deletes the checkpoints beyond trl_options' save_total_limit (`rotate`; only complete ones count)."""
    from transformers import TrainerCallback

    class CompletionMarker(TrainerCallback):
        def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            from skillrise_train.distributed import Ranks

            Ranks.current().barrier()  # every process has written its part (DeepSpeed shards, FSDP states)
            if state.is_world_process_zero:
                folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
                if folder.is_dir():
                    mark_complete(folder, state.global_step)
                    limit = getattr(args, SAVE_LIMIT_ATTRIBUTE, None)
                    if limit:
                        rotate(args.output_dir, int(limit))
            return control

    return CompletionMarker()
