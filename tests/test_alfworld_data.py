"""ALFWorld data handling: locating and extracting the game files, the task index, bad game files, the CLI.

Tests that need the game files find them through $ALFWORLD_DATA (CI) or ../shared/data/alfworld, and skip
(fail under SKILLRISE_REQUIRE_DATA=1) when absent.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import alfworld_data, need_data
from skillrise_gym.backends.alfworld import data as alfdata
from skillrise_gym.backends.alfworld.data import TaskDirInfo
from skillrise_gym.backends.base import DataNotFoundError


DATA = alfworld_data()


@pytest.fixture(scope="module")
def root():
    """The extracted json_2.1.1 folder (extracted once per cache)."""
    need_data(DATA, "ALFWorld game files ($ALFWORLD_DATA)")
    return alfdata.resolve_data_root(DATA)


# --------------------------------------------------------------------------- folder names (no data needed)
def test_folder_name_gives_type_object_and_expert_params():
    info = TaskDirInfo.parse("pick_heat_then_place_in_recep-Potato-None-SinkBasin-12")
    assert (info.task_type, info.object, info.mrecep, info.receptacle, info.scene) == (
        "pick_heat_then_place_in_recep", "Potato", "None", "SinkBasin", 12)
    assert info.pddl_params() == {"object_target": "Potato", "parent_target": "SinkBasin", "toggle_target": "",
                                  "mrecep_target": "", "object_sliced": False}
    look = TaskDirInfo.parse("look_at_obj_in_light-AlarmClock-None-DeskLamp-301").pddl_params()
    assert look["toggle_target"] == "DeskLamp" and look["parent_target"] == ""
    movable = TaskDirInfo.parse("pick_and_place_simple-AppleSliced-Bowl-Fridge-5").pddl_params()
    assert movable["mrecep_target"] == "Bowl" and movable["object_sliced"] and movable["object_target"] == "Apple"


@pytest.mark.parametrize("name", ["", "pick_and_place_simple-Potato-None-SinkBasin", "dance-Potato-None-Sink-1",
                                  "pick_and_place_simple-Potato-None-SinkBasin-x"])
def test_bad_folder_names_are_rejected(name):
    with pytest.raises(ValueError):
        TaskDirInfo.parse(name)


# --------------------------------------------------------------------------- missing data
def test_missing_data_says_how_to_get_it(tmp_path):
    for where in (tmp_path / "nowhere", tmp_path):  # absent, and present but empty
        with pytest.raises(DataNotFoundError) as err:
            alfdata.resolve_data_root(where)
        message = str(err.value)
        assert str(where) in message and "alfworld-download" in message and "json_2.1.1.tar.xz" in message


def test_missing_data_fails_at_backend_construction(tmp_path, monkeypatch):
    pytest.importorskip("alfworld")
    from skillrise_gym.backends.alfworld import ALFWorldBackend

    monkeypatch.setenv("ALFWORLD_DATA", str(tmp_path / "absent"))
    with pytest.raises(DataNotFoundError, match="ALFWORLD_DATA"):
        ALFWorldBackend()


def test_not_an_alfworld_archive(tmp_path):
    import tarfile

    (tmp_path / "x.txt").write_text("hello")
    archive = tmp_path / "json_2.1.1.tar.xz"
    with tarfile.open(archive, "w:xz") as tar:
        tar.add(tmp_path / "x.txt", arcname="x.txt")
    with pytest.raises(DataNotFoundError, match="not an ALFWorld"):
        alfdata.resolve_data_root(archive)


def _archive(tmp_path, entries, name="json_2.1.1.tar.xz"):
    """An xz tar of `entries` (arcname -> bytes, or None for a folder)."""
    import io
    import tarfile

    archive = tmp_path / name
    with tarfile.open(archive, "w:xz") as tar:
        for arcname, payload in entries.items():
            info = tarfile.TarInfo(arcname)
            if payload is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            else:
                info.size, info.mode = len(payload), 0o644
                tar.addfile(info, io.BytesIO(payload))
    return archive


GAME = "json_2.1.1/valid_seen/pick_and_place_simple-Potato-None-SinkBasin-12/trial_1/game.tw-pddl"


def test_an_archive_with_a_leading_dot_slash_is_accepted(tmp_path, monkeypatch):
    monkeypatch.setenv("SKILLRISE_CACHE", str(tmp_path / "cache"))
    archive = _archive(tmp_path, {".": None, "./json_2.1.1": None, "./" + GAME: b'{"walkthrough": []}'})
    root = alfdata.extract_archive(archive)
    assert root.name == "json_2.1.1" and (root.parent / GAME).read_bytes() == b'{"walkthrough": []}'


def test_a_member_name_too_long_for_the_file_system_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("SKILLRISE_CACHE", str(tmp_path / "cache"))
    archive = _archive(tmp_path, {"json_2.1.1/" + "a" * 300: b"x"})
    with pytest.raises(DataNotFoundError, match="300 bytes.*longer than the 255"):
        alfdata.extract_archive(archive)
    assert not alfdata.extracted_location(archive).joinpath("json_2.1.1").exists()


def test_expansion_is_capped_before_anything_is_written(tmp_path, monkeypatch):
    monkeypatch.setenv("SKILLRISE_CACHE", str(tmp_path / "cache"))
    bomb = _archive(tmp_path, {"json_2.1.1": None, **{f"json_2.1.1/z{i}": bytes(2 << 20) for i in range(3)}})
    assert bomb.stat().st_size < 20_000  # 6 MB of zeros
    monkeypatch.setenv("SKILLRISE_MAX_EXTRACT_BYTES", str(5 << 20))
    with pytest.raises(DataNotFoundError, match="expands to more than 5242880 bytes.*SKILLRISE_MAX_EXTRACT_BYTES"):
        alfdata.extract_archive(bomb)
    location = alfdata.extracted_location(bomb)
    assert not (location / "json_2.1.1").exists() and not list(location.glob(".extract-*"))
    monkeypatch.setenv("SKILLRISE_MAX_EXTRACT_BYTES", str(7 << 20))  # raised on purpose: extracted
    assert (alfdata.extract_archive(bomb) / "z2").stat().st_size == 2 << 20
    monkeypatch.setenv("SKILLRISE_MAX_EXTRACT_BYTES", "lots")
    with pytest.raises(ValueError, match="SKILLRISE_MAX_EXTRACT_BYTES"):
        alfdata.max_extract_bytes()
    assert alfdata.DEFAULT_MAX_EXTRACT_BYTES >= 3 * 332_416_329  # the official tree fits with room


def test_a_cap_that_is_not_a_number_is_a_bad_setting_exit_2_in_one_line(tmp_path, monkeypatch, capsys):
    """A ConfigurationError, which the bench and trainer report in one line with exit 2 (not a traceback)."""
    import argparse

    from skillrise_gym.backends.alfworld.datatool import run
    from skillrise_gym.backends.base import ConfigurationError

    monkeypatch.setenv("SKILLRISE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("SKILLRISE_MAX_EXTRACT_BYTES", "abc")
    with pytest.raises(ConfigurationError):
        alfdata.max_extract_bytes()
    archive = _archive(tmp_path, {"json_2.1.1": None, "json_2.1.1/a": b"x"})
    assert run(argparse.Namespace(data_dir=None, extract=str(archive), download=False)) == 2
    err = capsys.readouterr().err.strip()
    assert "SKILLRISE_MAX_EXTRACT_BYTES" in err and len(err.splitlines()) == 1


def test_importing_the_backend_package_does_not_import_the_engine():
    code = "import sys, skillrise_gym.backends.alfworld; print(any(m in sys.modules for m in ('textworld', 'alfworld', 'fast_downward')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


# --------------------------------------------------------------------------- real data
def test_archive_is_extracted_once_into_the_cache(root):
    assert root.name == "json_2.1.1" and (root / "train").is_dir()
    archive = DATA if DATA.is_file() else DATA / "json_2.1.1.tar.xz"
    if archive.is_file():  # the data came as an archive: it went into the project cache, not beside it
        assert root.parent == alfdata.extracted_location(archive)
        stamp = root.stat().st_mtime_ns
        assert alfdata.resolve_data_root(archive) == root == alfdata.resolve_data_root(archive.parent)
        assert root.stat().st_mtime_ns == stamp  # not extracted again
        assert not any(p.name.startswith(".extract-") for p in root.parent.iterdir())


def test_split_sizes_and_names(root):
    counts = {}
    for split, folder in alfdata.SPLIT_FOLDERS.items():
        if (root / folder).is_dir():
            index = alfdata.load_index(root / folder)
            counts[split] = len(index["games"])
            assert index["skipped"] == []
        else:
            with pytest.raises(DataNotFoundError, match=folder):
                alfdata.split_folder(root, split)
    assert counts["train"] == 3553 and counts["eval_in_distribution"] == 140 and counts["valid_train"] == 200


def test_index_is_cached_and_follows_changes(tmp_path, root):
    split = tmp_path / "json_2.1.1" / "train"
    games = sorted((root / "valid_seen").glob("*/*/game.tw-pddl"))[:3]
    for game in games:
        target = split / game.parent.relative_to(root / "valid_seen")
        target.mkdir(parents=True)
        shutil.copy(game, target / "game.tw-pddl")
    first = alfdata.load_index(split)
    assert len(first["games"]) == 3
    assert alfdata.load_index(split) == first
    # walkthrough lengths are the difficulty: they come from the files themselves
    for entry in first["games"]:
        data = json.loads((split / entry["id"] / "game.tw-pddl").read_text())
        assert entry["walkthrough_len"] == len(data["walkthrough"])
    # change one game: the index notices (keyed by size and mtime)
    changed = split / first["games"][0]["id"] / "game.tw-pddl"
    data = json.loads(changed.read_text())
    data["walkthrough"] = data["walkthrough"] + ["look"]
    changed.write_text(json.dumps(data))
    assert alfdata.load_index(split)["games"][0]["walkthrough_len"] == first["games"][0]["walkthrough_len"] + 1


def test_data_identity_follows_the_game_files_not_their_location(tmp_path, root):
    pytest.importorskip("alfworld")
    from skillrise_gym.backends.alfworld import ALFWorldBackend

    games = sorted((root / "valid_seen").glob("*/*/game.tw-pddl"))[:3]
    for copy in ("a", "b"):
        for game in games:
            target = tmp_path / copy / "json_2.1.1" / "valid_seen" / game.parent.relative_to(root / "valid_seen")
            target.mkdir(parents=True)
            shutil.copy(game, target / "game.tw-pddl")
    a, b = (ALFWorldBackend.data_identity({"data_dir": str(tmp_path / c)}) for c in ("a", "b"))
    assert a["fingerprint"] == b["fingerprint"] and a["source"] != b["source"]
    changed = next((tmp_path / "b" / "json_2.1.1").rglob("game.tw-pddl"))
    changed.write_text(changed.read_text() + " ")
    assert ALFWorldBackend.data_identity({"data_dir": str(tmp_path / "b")})["fingerprint"] != a["fingerprint"]


def test_corrupt_and_unsolvable_games_are_skipped_with_a_warning(tmp_path, root):
    pytest.importorskip("alfworld")
    from skillrise_gym.backends.alfworld import ALFWorldBackend

    top = tmp_path / "json_2.1.1"
    good = sorted((root / "valid_seen").glob("*/*/game.tw-pddl"))[:2]
    for game in good:
        target = top / "valid_seen" / game.parent.relative_to(root / "valid_seen")
        target.mkdir(parents=True)
        shutil.copy(game, target / "game.tw-pddl")
    template = json.loads(good[0].read_text())

    def add(name: str, content: str) -> None:
        folder = top / "valid_seen" / name / "trial_T0"
        folder.mkdir(parents=True)
        (folder / "game.tw-pddl").write_text(content)

    add("pick_and_place_simple-Mug-None-Desk-301", '{"pddl_domain": "(define')  # truncated JSON
    add("pick_and_place_simple-Pen-None-Desk-302", json.dumps({**template, "solvable": False}))
    add("pick_and_place_simple-Pen-None-Desk-303", json.dumps({**template, "walkthrough": []}))
    add("not-a-task-folder", json.dumps(template))
    add("pick_and_place_simple-Box-None-Desk-304", "\x00\xff\xfe binary garbage")

    backend = ALFWorldBackend(data_dir=tmp_path)
    with pytest.warns(UserWarning, match="skipped 5 of 7"):
        tasks = backend.list_tasks("eval_in_distribution")
    assert len(tasks) == 2
    assert len(backend.skipped["eval_in_distribution"]) == 5
    reasons = " ".join(s["reason"] for s in backend.skipped["eval_in_distribution"])
    assert "unsolvable" in reasons and "walkthrough" in reasons and "unreadable" in reasons
    assert not list(top.rglob("traj_data.json"))  # nothing written into the data folder


def test_data_cli_warms_the_reset_cache(tmp_path, root, capsys):
    pytest.importorskip("alfworld")
    from skillrise_gym.backends.alfworld import datatool

    for game in sorted((root / "valid_seen").glob("*/*/game.tw-pddl"))[:2]:
        target = tmp_path / "json_2.1.1" / "valid_seen" / game.parent.relative_to(root / "valid_seen")
        target.mkdir(parents=True)
        shutil.copy(game, target / "game.tw-pddl")
    parser = argparse.ArgumentParser()
    datatool.add_arguments(parser)
    assert datatool.run(parser.parse_args(["--data-dir", str(tmp_path), "--warm-cache", "eval_in_distribution"])) == 0
    assert "warmed 2/2 games" in capsys.readouterr().out


def test_tasks_ids_families_and_difficulty(root):
    pytest.importorskip("alfworld")
    from skillrise_gym.backends.alfworld import ALFWorldBackend

    backend = ALFWorldBackend(data_dir=root)
    tasks = backend.list_tasks("eval_in_distribution")
    assert tasks == backend.list_tasks("eval_in_distribution")  # deterministic
    assert {t.family for t in tasks} == set(alfdata.TASK_TYPES)
    for task in tasks[::20]:
        folder, trial = task.id.split("/")
        assert trial.startswith("trial_") and Path(task.payload["gamefile"]).is_file()
        assert task.family == folder.split("-")[0] and task.split == "eval_in_distribution"
        walkthrough = json.loads(Path(task.payload["gamefile"]).read_text())["walkthrough"]
        assert task.difficulty == len(walkthrough) > 0
    by_object = ALFWorldBackend(data_dir=root, family="task_type_object").list_tasks("eval_in_distribution")
    assert by_object[0].family == f"{by_object[0].payload['task_type']}/{by_object[0].payload['object']}"
    # ALFWorld's own names of its evaluation splits are aliases of ours
    assert [t.id for t in backend.list_tasks("valid_seen")] == [t.id for t in backend.list_tasks("eval_in_distribution")]
    with pytest.raises(ValueError, match="also valid_seen, valid_unseen: valid_seen is eval_in_distribution"):
        backend.list_tasks("valid_sen")
    with pytest.raises(ValueError):
        ALFWorldBackend(data_dir=root, family="colour")
    with pytest.raises(ValueError):
        ALFWorldBackend(data_dir=root, expert="oracle")


def test_data_cli_reports_games_per_split(root, capsys):
    from skillrise_gym.backends.alfworld import datatool

    parser = argparse.ArgumentParser()
    datatool.add_arguments(parser)
    assert datatool.run(parser.parse_args(["--data-dir", str(DATA)])) == 0
    out = capsys.readouterr().out
    assert "3553 games" in out and "140 games" in out and "200 games" in out and "valid_unseen): missing" in out
    assert datatool.run(parser.parse_args(["--data-dir", str(root.parent / "absent")])) == 1
    assert "alfworld-download" in capsys.readouterr().err
    assert datatool.run(parser.parse_args(["--data-dir", str(DATA), "--warm-cache", "nope"])) == 2
    archive = DATA if DATA.is_file() else DATA / "json_2.1.1.tar.xz"
    if archive.is_file():
        assert datatool.run(parser.parse_args(["--extract", str(archive)])) == 0
        assert f"-> {root}" in capsys.readouterr().out  # already extracted: the same folder
