"""ALFWorld game files: where they are looked for, what was found, verify, download, extract.

    skillrise-data alfworld                      # where it looks, games per split
    skillrise-data alfworld --verify             # also load every game's JSON (and --play N games on the engine)
    skillrise-data alfworld --extract ARCHIVE    # extract a json_2.1.1.tar.xz once into the cache
    skillrise-data alfworld --download           # run ALFWorld's official downloader (needs the internet)
    skillrise-data alfworld --warm-cache SPLIT   # reset every game of SPLIT once: later resets hit the cache
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

from skillrise_gym.backends.alfworld.data import (
    SPLIT_FOLDERS,
    build_index,
    default_data_dir,
    extract_archive,
    load_index,
    resolve_data_root,
)
from skillrise_gym.backends.base import ConfigurationError, DataNotFoundError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", default=None,
                        help="folder with json_2.1.1/ or json_2.1.1.tar.xz, or the archive (default: $ALFWORLD_DATA, "
                             "else ~/.cache/alfworld)")
    parser.add_argument("--extract", metavar="ARCHIVE", default=None,
                        help="extract this json_2.1.1.tar.xz into the cache (once) and use it")
    parser.add_argument("--download", action="store_true",
                        help="run ALFWorld's downloader `alfworld-download` into the data folder (needs the internet)")
    parser.add_argument("--verify", action="store_true",
                        help="re-read every game file (ignoring the index cache) and report unusable ones")
    parser.add_argument("--play", type=int, default=0, metavar="N",
                        help="with --verify: replay the walkthrough of the first N games of each split on the engine")
    parser.add_argument("--warm-cache", metavar="SPLIT", default=None,
                        help="load and reset every game of SPLIT once, filling the reset cache (~0.12 MB a game)")


def _download(target: Path) -> int:
    beside = Path(sys.executable).parent / "alfworld-download"  # this environment's copy, even if not on PATH
    exe = str(beside) if beside.is_file() else shutil.which("alfworld-download")
    if exe is None:
        print("alfworld-download not found: pip install 'skillrise-gym[alfworld]' first", file=sys.stderr)
        return 2
    env = dict(os.environ, ALFWORLD_DATA=str(target))
    print(f"running alfworld-download into {target} (needs the internet)")
    result = subprocess.run([exe, "--data-dir", str(target)], env=env)
    if result.returncode != 0:
        print(f"alfworld-download failed (exit {result.returncode}); offline? Copy json_2.1.1/ or "
              f"json_2.1.1.tar.xz into {target} instead.", file=sys.stderr)
    return result.returncode


def _play(data_dir: Path, split: str, n: int) -> tuple[int, int]:
    from skillrise_gym.backends.alfworld.backend import ALFWorldBackend

    backend = ALFWorldBackend(data_dir=data_dir)
    won = 0
    tasks = backend.list_tasks(split)[:n]
    for task in tasks:
        result = backend.reset(task)
        while not result.done and (action := backend.expert_action()) is not None:
            result = backend.step(action)
        won += int(result.success)
    backend.close()
    return won, len(tasks)


def _warm(root: Path, split: str) -> int:
    import time

    from skillrise_gym.backends.alfworld.backend import ALFWorldBackend

    backend = ALFWorldBackend(data_dir=root)
    tasks = backend.list_tasks(split)
    start, failed = time.perf_counter(), 0
    for i, task in enumerate(tasks, start=1):
        try:
            backend.reset(task)
        except Exception as exc:  # report and go on: one bad game must not stop the warm-up
            failed += 1
            print(f"  {task.id}: {exc}", file=sys.stderr)
        if i % 100 == 0 or i == len(tasks):
            print(f"  warmed {i}/{len(tasks)} games of {split} ({time.perf_counter() - start:.0f} s)", flush=True)
    backend.close()
    return 1 if failed else 0


def run(args: argparse.Namespace) -> int:
    given = Path(args.data_dir).expanduser() if args.data_dir else default_data_dir()
    print(f"looking in: {given}  ({'--data-dir' if args.data_dir else '$ALFWORLD_DATA' if os.environ.get('ALFWORLD_DATA') else 'default ~/.cache/alfworld'})")
    if args.download:
        code = _download(given)
        if code:
            return code
    try:
        if args.extract:
            root = extract_archive(args.extract)
            print(f"extracted {args.extract} -> {root}")
        else:
            root = resolve_data_root(given)
    except ConfigurationError as exc:  # a bad setting ($SKILLRISE_MAX_EXTRACT_BYTES)
        print(str(exc), file=sys.stderr)
        return 2
    except DataNotFoundError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    print(f"game files: {root}")
    total_skipped = 0
    for split, folder_name in SPLIT_FOLDERS.items():
        folder = root / folder_name
        if not folder.is_dir():
            print(f"  {split:26s} ({folder_name}): missing")
            continue
        index = build_index(folder) if args.verify else load_index(folder)
        skipped = index["skipped"]
        total_skipped += len(skipped)
        line = f"  {split:26s} ({folder_name}): {len(index['games'])} games"
        if skipped:
            line += f", {len(skipped)} skipped"
        print(line)
        for entry in skipped[:10]:
            print(f"      skipped {entry['id']}: {entry['reason']}")
        if args.verify and args.play:
            won, n = _play(root, split, args.play)
            print(f"      walkthrough replay: {won}/{n} won")
    if args.verify:
        print("verify: OK" if total_skipped == 0 else f"verify: {total_skipped} unusable game file(s)")
    if args.warm_cache:
        if args.warm_cache not in SPLIT_FOLDERS:
            print(f"unknown split {args.warm_cache!r}; known: {', '.join(SPLIT_FOLDERS)}", file=sys.stderr)
            return 2
        return _warm(root, args.warm_cache)
    return 0
