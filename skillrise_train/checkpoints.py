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
bench's lock, `skillrise_gym.bench.store`), `claim_run` refuses a folder holding files the trainer did not
write and marks it as a run's (`RUN_MARKER`), `run_contents` says whether it holds a run (which then needs
--resume, or --overwrite: `clear_run`, which deletes the run's outputs and nothing else), `resume_settings`
refuses a --resume whose settings differ from the run's config.json, and `rotate` enforces
`save_total_limit` only among complete checkpoints, after the new one is marked (transformers would delete
the older ones before the marker is written, so a kill in between could leave no complete checkpoint at all).
"""

from __future__ import annotations

import json
import math
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
OUTPUTS = ("config.json", "final", "final-merged", "final-merged.tmp", "eval", "warmstart.json", "README.md", "runs",
           "tensorboard", "learning_curves.png")
#: written first into every output folder the trainer uses: a folder without it (nor an older version's
#: config.json) must be empty, so the run's outputs (RECORDS, OUTPUTS, checkpoint-N) are never a user's files
RUN_MARKER = "skillrise-run.json"
#: the TrainConfig fields a --resume may change: how long and how the run goes on, never what it trains
RESUME_MAY_CHANGE = frozenset({
    "steps", "eval_interval", "eval_sequences", "save_interval", "save_merged", "output_dir", "resume", "overwrite",
    "record_turns", "threads", "envs", "env_workers", "env_timeout", "ray_address", "ray_num_cpus", "ray_memory",
    "overlap", "overlap_wait", "use_vllm", "vllm_gpu_memory_utilization", "bf16", "generation_dtype",
    "prefix_cache_mb", "share_prefixes", "gradient_checkpointing", "generation_batch", "micro_batch_tokens",
    "report_to", "progress"})
#: trl_options keys a --resume may change (logging, saving, the hub, data loading, vLLM's server): by prefix or name
RESUME_MAY_CHANGE_TRL = ("hub_", "logging_", "dataloader_", "vllm_", "report_to", "run_name", "save_total_limit",
                         "disable_tqdm", "log_level", "push_to_hub")
#: fields whose default means "resolved by the run" (config.json records the resolved value): on --resume the
#: default takes the recorded value, so the resumed run plays what the run played
RESOLVED_DEFAULTS = {"prompt_style": "auto", "max_task_steps": None, "train_split": None, "eval_split": None}
#: the GRPOConfig attribute that carries trl_options' save_total_limit to `completion_callback` (TRL's own
#: save_total_limit stays None: see the module docstring)
SAVE_LIMIT_ATTRIBUTE = "skillrise_save_total_limit"


class RunFolderError(SkillRiseError, ValueError):
    """The output folder cannot be used as asked (another trainer holds it, it holds a run and neither
    --resume nor --overwrite was given, ...); the message says what to do."""


def make_output_dir(out: str | os.PathLike) -> Path:
    """`out` made (with its parents) when missing; a file there, or a file on its path, is a `RunFolderError`."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise RunFolderError(f"--output-dir {out} exists and is not a folder; choose another --output-dir")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except (NotADirectoryError, FileExistsError):
        raise RunFolderError(f"--output-dir {out} cannot be created: a part of its path is a file, not a folder; "
                             "choose another --output-dir") from None
    return out


def lock_output_dir(out: str | os.PathLike) -> Any:
    """Hold `out`'s lock file (the bench's, `skillrise_gym.bench.store`) until the returned handle is closed;
    a folder another process holds, or a lock file that cannot be one, is a `RunFolderError`."""
    from skillrise_gym.bench.store import LockHeld, RunDirError, _lock

    try:
        return _lock(Path(out))
    except LockHeld:
        raise RunFolderError(f"another skillrise-train process is writing to --output-dir {out} (it holds "
                             f"{Path(out) / '.lock'}); wait for it to end or choose another --output-dir") from None
    except RunDirError as exc:
        raise RunFolderError(f"--output-dir {out}: {exc}") from None


def _older_run_config(path: Path) -> bool:
    """Whether `path` is the config.json of a run made before `RUN_MARKER` existed."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and {"env", "algo", "model", "K", "G", "S", "steps"} <= set(data)


def foreign_entries(out: str | os.PathLike) -> list[str]:
    """What in `out` the trainer did not write, sorted: everything but the lock file in a folder that holds no
    run (no `RUN_MARKER`, no skillrise-train config.json); [] in a run's folder."""
    from skillrise_gym.bench.store import LOCK

    out = Path(out)
    if not out.is_dir() or (out / RUN_MARKER).exists() or _older_run_config(out / "config.json"):
        return []
    marker_in_flight = re.compile(rf"^\.{re.escape(RUN_MARKER)}\..*\.tmp$")  # atomic_write's, killed midway
    return sorted(p.name for p in out.iterdir() if p.name != LOCK and not marker_in_flight.match(p.name))


def claim_run(out: str | os.PathLike) -> None:
    """Refuse `out` when it holds files the trainer did not write (`foreign_entries`, named), else mark it as
    a run's folder (`RUN_MARKER`; an older version's run gets it too)."""
    out = Path(out)
    foreign = foreign_entries(out)
    if foreign:
        shown = ", ".join(foreign[:8]) + (f", ... ({len(foreign)} in all)" if len(foreign) > 8 else "")
        raise RunFolderError(f"--output-dir {out} holds files skillrise-train did not write ({shown}); the trainer "
                             "writes only into a new or empty folder (or one of its runs), so that it never replaces "
                             "or deletes them: choose another --output-dir, or move them away")
    if not (out / RUN_MARKER).exists():
        atomic_write(out / RUN_MARKER, json.dumps({
            "tool": "skillrise-train", "marker_version": 1,
            "about": "this folder holds a skillrise-train run; --overwrite and --resume delete only the run's own "
                     f"outputs ({', '.join(RECORDS + ('checkpoint-N/',) + OUTPUTS)}), never other files"},
            indent=1) + "\n", fsync=True)


def resume_settings(out: str | os.PathLike, current: dict[str, Any]) -> dict[str, Any]:
    """Check a --resume's settings (`current`: `TrainConfig.to_dict()`) against the run's config.json: a
    field outside `RESUME_MAY_CHANGE` that differs is a `RunFolderError` naming every such field with both
    values. Returns the values of `RESOLVED_DEFAULTS` fields left at their default that the run resolved (the
    caller sets them). No config.json: nothing to check ({})."""
    path = Path(out) / "config.json"
    if not path.exists():
        return {}
    try:
        recorded = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        recorded = exc
    if not isinstance(recorded, dict):
        why = recorded if isinstance(recorded, Exception) else "not a JSON object"
        raise RunFolderError(f"--resume: {path} is unreadable ({why}): the run's settings are unknown, so it cannot "
                             "be resumed safely; restore the file, or start over with --overwrite")
    current = json.loads(json.dumps(current))  # plain JSON types, as recorded
    adopted: dict[str, Any] = {}
    differences = []
    for key in sorted(set(current) & set(recorded) - RESUME_MAY_CHANGE):
        old, new = recorded[key], current[key]
        if key in RESOLVED_DEFAULTS:
            if old is None or old == RESOLVED_DEFAULTS[key]:
                continue  # recorded unresolved (an older version): what it resolved to is unknown
            if new == RESOLVED_DEFAULTS[key]:
                adopted[key] = old
                continue
        if key == "trl_options" and isinstance(old, dict) and isinstance(new, dict):
            for option in sorted(set(old) | set(new)):
                if not option.startswith(RESUME_MAY_CHANGE_TRL) and old.get(option) != new.get(option):
                    differences.append(f"trl_options {option}: {old.get(option)!r} in the run, {new.get(option)!r} now")
        elif old != new:
            differences.append(f"{key}: {old!r} in the run, {new!r} now")
    if differences:
        raise RunFolderError(f"--resume: {Path(out)} holds a run made with other settings ({'; '.join(differences)}); "
                             "resume it with its own settings (only how it goes on may change: --steps, the intervals, "
                             "threads, the env pool, ...), start it over with --overwrite, or choose another "
                             "--output-dir")
    return adopted


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

    def step(record: Any, nested: bool = False) -> int:
        if not isinstance(record, dict):
            raise ValueError(f"a JSON {type(record).__name__}, not an object")
        extra = record.get("extra") if isinstance(record.get("extra"), dict) else {}
        value = extra.get("step", record.get("step", 0)) if nested else record.get("step", 0)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                or value != int(value):
            raise ValueError(f"its step is {value!r}, not a whole number")
        return int(value)

    keep = {
        "turns.jsonl": lambda r: step(r, nested=True) < rollouts,
        "metrics.jsonl": lambda r: step(r) <= global_step,
        "eval.jsonl": lambda r: step(r) <= rollouts,
    }
    dropped: dict[str, int] = {}
    for name, wanted in keep.items():
        path = out / name
        if not path.is_file():
            continue
        # lines end at "\n" only (a record's text may hold other line breaks, such as U+2028, unescaped)
        raw = [line + b"\n" for line in path.read_bytes().split(b"\n")]
        raw[-1] = raw[-1][:-1]  # what follows the last newline: nothing, or an interrupted final write
        numbered = [(number, line) for number, line in enumerate(raw, 1) if line.strip()]
        lines = [line for _number, line in numbered]
        kept = []
        for number, line in numbered:
            if not line.endswith(b"\n"):
                continue  # an interrupted final write
            try:
                line = line.decode("utf-8")
                record = json.loads(line)
                wanted_now = wanted(record)
            except (ValueError, RecursionError) as exc:
                why = (exc.msg if isinstance(exc, json.JSONDecodeError) else "not UTF-8" if
                       isinstance(exc, UnicodeDecodeError) else str(exc) or "nested too deeply")
                raise RunFolderError(
                    f"--resume: {path}:{number} is not a record the trainer wrote ({why}): the file was edited or "
                    "damaged, so its steps cannot be matched to the checkpoint; restore the file, delete that line, "
                    "or start the run over with --overwrite") from None
            if wanted_now:
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
