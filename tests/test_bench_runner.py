"""skillrise-bench on the toy backend: records, summaries, plots, resume, and bad run directories."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from skillrise_gym.bench.cli import main
from skillrise_gym.records import Turn, read_turns

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def bench(out: Path, *extra: str, agent: str = "expert", K: tuple[int, ...] = (1, 3), n: int = 6) -> int:
    return main(["--env", "toy", "--agent", agent, "--K", *map(str, K), "--num-sequences", str(n),
                 "--out", str(out), "--env-workers", "0", "--no-progress", *extra])


def results(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


def assert_consistent(out: Path, expected_keys: set[tuple[int, int]]) -> None:
    """Every requested sequence recorded exactly once, with exactly its own turns."""
    rows = results(out)
    keys = [(r["K"], r["index"]) for r in rows]
    assert sorted(keys) == sorted(expected_keys) and len(set(keys)) == len(keys)
    turns = read_turns(out / "turns.jsonl")
    by_trial: dict[str, list[Turn]] = {}
    for turn in turns:
        by_trial.setdefault(turn.trial_id, []).append(turn)
    assert set(by_trial) == {r["trial_id"] for r in rows}
    for row in rows:
        played = by_trial[row["trial_id"]]
        assert len(played) == row["calls"]
        assert [t.position for t in played if t.role == "solve" and t.task_done] == list(range(row["K"]))


def test_expert_solves_every_toy_task_and_outputs_are_complete(tmp_path, capsys):
    out = tmp_path / "run"
    assert bench(out, "--mode", "cross") == 0
    table = capsys.readouterr().out
    assert "| K | seqs | success [95% CI]" in table and "| 3 | 6 | 1.00 [0.61, 1.00] |" in table  # Wilson, 6/6
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "complete" and summary["finished"] == 12
    for block in summary["blocks"]:
        assert block["success"]["mean"] == 1.0 and len(block["success_by_position"]) == block["K"]
        assert block["invalid_format_rate"] == 0.0
    assert_consistent(out, {(K, i) for K in (1, 3) for i in range(6)})
    turns = read_turns(out / "turns.jsonl")
    curates = [t for t in turns if t.role == "curate"]
    assert curates and all(t.format_valid and t.action == "" for t in curates)  # keeps the empty document
    assert all(t.benchmark == "toy" and t.prompt for t in turns)
    for name in ("success_by_position.png", "success_vs_K.png"):
        data = (out / name).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 1000
        import matplotlib.image

        assert matplotlib.image.imread(out / name).ndim == 3


def test_same_sequences_for_every_agent_and_random_is_reproducible(tmp_path):
    assert bench(tmp_path / "expert") == 0
    assert bench(tmp_path / "random1", agent="random") == 0
    assert main(["--env", "toy", "--agent", "random", "--K", "1", "3", "--num-sequences", "6", "--out",
                 str(tmp_path / "random2"), "--env-workers", "2", "--envs", "3", "--no-progress"]) == 0
    expert, random1, random2 = (sorted(results(tmp_path / d), key=lambda r: (r["K"], r["index"]))
                                for d in ("expert", "random1", "random2"))
    assert [r["task_ids"] for r in expert] == [r["task_ids"] for r in random1]
    # the random agent's choices do not depend on workers, batching or scheduling
    assert [(r["success"], r["steps"]) for r in random1] == [(r["success"], r["steps"]) for r in random2]
    turns = read_turns(tmp_path / "random1" / "turns.jsonl")
    assert {t.action for t in turns if t.role == "solve"} > {"look"}


def test_repeat_mode_reports_pass_at_k(tmp_path):
    out = tmp_path / "repeat"
    assert bench(out, "--mode", "repeat", agent="random", K=(3,), n=8) == 0
    block = json.loads((out / "summary.json").read_text())["blocks"][0]
    rows = results(out)
    assert all(len(set(r["task_ids"])) == 1 for r in rows)
    solved = np.maximum.accumulate(np.array([r["success"] for r in rows], float), axis=1)
    assert [block["pass_at_k"][str(k)]["mean"] for k in (1, 2, 3)] == pytest.approx(solved.mean(axis=0).tolist())


def test_rerun_skips_finished_sequences_and_can_extend(tmp_path):
    out = tmp_path / "run"
    assert bench(out, n=4) == 0
    before = (out / "turns.jsonl").read_bytes()
    assert bench(out, n=4) == 0
    assert (out / "turns.jsonl").read_bytes() == before
    assert json.loads((out / "summary.json").read_text())["session"]["sequences"] == 0
    assert bench(out, n=6) == 0  # more sequences of the same draw: only the new ones are played
    assert json.loads((out / "summary.json").read_text())["session"]["sequences"] == 4
    assert_consistent(out, {(K, i) for K in (1, 3) for i in range(6)})


def test_torn_writes_and_orphan_turns_are_dropped_on_resume(tmp_path):
    out = tmp_path / "run"
    assert bench(out, n=4) == 0
    rows = results(out)
    lost = rows[-1]
    # simulate a kill: the last sequence's result line never made it, plus a torn partial turn line
    (out / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:-1]) + '{"K": 3, "ind')
    with open(out / "turns.jsonl", "a") as handle:
        handle.write('{"role": "solve", "sequ')
    assert bench(out, n=4) == 0
    assert json.loads((out / "summary.json").read_text())["session"]["sequences"] == 1
    assert_consistent(out, {(K, i) for K in (1, 3) for i in range(4)})
    assert results(out)[-1]["trial_id"] == lost["trial_id"]


def test_conflicting_arguments_against_an_existing_run(tmp_path, capsys):
    out = tmp_path / "run"
    assert bench(out, n=2) == 0
    capsys.readouterr()
    assert bench(out, "--mode", "repeat", n=2) == 2
    assert "mode: 'cross' in the directory, 'repeat' now" in capsys.readouterr().err
    assert bench(out, "--seed", "3", agent="random", n=2) == 2
    err = capsys.readouterr().err
    assert "seed: 0 in the directory, 3 now" in err and "agent:" in err


def test_resuming_after_the_data_changed_is_refused(tmp_path, capsys, monkeypatch):
    """The backend's data source and fingerprint are in the manifest (issue 11 item 12): a resume with
    other data (here: the toy backend told its data moved and changed) is refused, naming both; the same
    fingerprint from another place resumes; a manifest from before fingerprints resumes."""
    from skillrise_gym.backends.toy import ToyBackend

    data = {"source": "/data/a", "fingerprint": "v1"}
    monkeypatch.setattr(ToyBackend, "data_identity", classmethod(lambda cls, options: dict(data)))
    out = tmp_path / "run"
    assert bench(out, n=2) == 0
    assert json.loads((out / "manifest.json").read_text())["identity"]["data"] == data
    data.update(source="/data/b", fingerprint="v2")
    capsys.readouterr()
    assert bench(out, n=3) == 2
    assert "data: /data/a (v1) in the directory, /data/b (v2) now" in capsys.readouterr().err
    assert len(results(out)) == 4  # nothing was added
    data.update(source="/mnt/copy-of-a", fingerprint="v1")  # the same files, elsewhere
    assert bench(out, n=3) == 0 and len(results(out)) == 6
    manifest = json.loads((out / "manifest.json").read_text())
    del manifest["identity"]["data"]  # written before data fingerprints existed
    (out / "manifest.json").write_text(json.dumps(manifest))
    assert bench(out, n=3) == 0


def test_foreign_and_unreadable_output_directories(tmp_path, capsys):
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    assert bench(foreign, n=1) == 2
    assert "not a skillrise-bench run directory" in capsys.readouterr().err
    assert (foreign / "notes.txt").read_text() == "mine" and len(list(foreign.iterdir())) == 1

    a_file = tmp_path / "file"
    a_file.write_text("x")
    assert bench(a_file, n=1) == 2
    assert "is not a directory" in capsys.readouterr().err

    broken = tmp_path / "broken"
    assert bench(broken, n=1) == 0
    (broken / "manifest.json").write_text("{not json")
    assert bench(broken, n=1) == 2
    assert "unreadable" in capsys.readouterr().err

    corrupt = tmp_path / "corrupt"
    assert bench(corrupt, n=2) == 0
    lines = (corrupt / "results.jsonl").read_text().splitlines()
    (corrupt / "results.jsonl").write_text("\n".join(["garbage"] + lines[1:]) + "\n")
    assert bench(corrupt, n=2) == 2
    assert "results.jsonl:1 is not a JSON record" in capsys.readouterr().err


def test_bad_arguments_are_reported(tmp_path, capsys):
    assert main(["--env", "toy", "--agent", "expert", "--K", "0", "--out", str(tmp_path / "a"), "--no-progress"]) == 2
    assert "K must be positive" in capsys.readouterr().err
    assert main(["--env", "toy", "--agent", "expert", "--split", "nope", "--out", str(tmp_path / "b")]) == 2
    assert "unknown split" in capsys.readouterr().err
    assert main(["--env", "toy", "--agent", "openai", "--out", str(tmp_path / "c")]) == 2
    assert "needs --base-url and --model" in capsys.readouterr().err
    assert main(["--env", "toy", "--agent", "random", "--model", "x", "--out", str(tmp_path / "d")]) == 2
    assert "takes no --model" in capsys.readouterr().err
    assert main(["--env", "toy", "--agent", "expert", "--backend-option", "novalue", "--out", str(tmp_path / "e")]) == 2
    assert "KEY=VALUE" in capsys.readouterr().err
    assert not any((tmp_path / d).exists() for d in "abcde")



class KillingExpert:
    """The expert, plus a real SIGKILL of the env worker process at chosen calls (a crashed engine process)."""

    def __new__(cls, kill_at: set[int]):
        import multiprocessing
        import os
        import signal

        from skillrise_gym.agents.expert import ExpertAgent

        class _Agent(ExpertAgent):
            calls = 0

            def act(self, observations, infos=None):
                type(self).calls += 1
                if type(self).calls in kill_at:
                    for child in multiprocessing.active_children():
                        if child.name.startswith("skillrise-env-"):
                            os.kill(child.pid, signal.SIGKILL)
                            child.join(timeout=10)
                return super().act(observations, infos)

        return _Agent()


def test_a_dead_worker_costs_only_a_replay_of_the_sequences_in_flight(tmp_path):
    from skillrise_gym.bench.runner import BenchConfig, run_bench

    config = BenchConfig(env="toy", out=str(tmp_path / "run"), K=[3], num_sequences=5, workers=1, parallel=2,
                         progress=False, plots=False)
    outcome = run_bench(config, KillingExpert({4}))
    assert outcome.status == "complete"
    assert_consistent(tmp_path / "run", {(3, i) for i in range(5)})
    rows = results(tmp_path / "run")
    assert sorted(r["attempt"] for r in rows) == [1, 1, 1, 2, 2]  # the two in flight were replayed once
    assert all(r["success"] == [True] * 3 for r in rows)


def test_a_worker_that_keeps_dying_stops_the_run_resumably(tmp_path):
    from skillrise_gym.bench.runner import BenchConfig, run_bench
    from skillrise_gym.pools import WorkerError

    config = BenchConfig(env="toy", out=str(tmp_path / "run"), K=[3], num_sequences=3, workers=1, parallel=1,
                         progress=False, plots=False, max_attempts=2)
    with pytest.raises(WorkerError, match="lost its worker 2 times"):
        run_bench(config, KillingExpert({3, 4}))
    assert not (tmp_path / "run" / "results.jsonl").exists()
    assert run_bench(config, KillingExpert(set())).status == "complete"
    assert_consistent(tmp_path / "run", {(3, i) for i in range(3)})


def test_backend_option_values_are_json_or_python_literals_or_strings():
    from skillrise_gym.bench.cli import parse_backend_options

    parsed = parse_backend_options(["human_goals=False", "a=true", "b=None", "c=10", "d=1e3", "e=hello",
                                    'f="x"', "g=(1, 2)", "h="])
    assert parsed == {"human_goals": False, "a": True, "b": None, "c": 10, "d": 1000.0, "e": "hello", "f": "x",
                      "g": (1, 2), "h": ""}
    with pytest.raises(ValueError, match="KEY=VALUE"):
        parse_backend_options(["novalue"])


@pytest.mark.parametrize("K", [1, 2])
def test_a_task_that_fails_to_load_is_an_engine_error_and_the_run_goes_on(tmp_path, K):
    from skillrise_gym.backends.toy import ToyBackend
    from skillrise_gym.bench.runner import BenchConfig, run_bench
    from skillrise_gym.agents.expert import ExpertAgent

    broken = [t.id for t in ToyBackend().list_tasks("test") if t.family == "red"]
    config = BenchConfig(env="toy", out=str(tmp_path / "run"), K=[K], num_sequences=8, split="test", progress=False,
                         plots=False, backend_options={"fail_to_load": broken})
    outcome = run_bench(config, ExpertAgent())
    assert outcome.status == "complete"
    rows = results(tmp_path / "run")
    assert len(rows) == 8
    failed = [r for r in rows if r["family"] == "red"]
    assert failed and all(all("could not load" in e for e in r["engine_errors"]) and not any(r["success"])
                          for r in failed)
    assert all(all(r["success"]) for r in rows if r["family"] != "red")  # the others are played as usual
    assert run_bench(config, ExpertAgent()).status == "complete"  # a rerun finds nothing left to do


@pytest.mark.parametrize("fail_at", ["turns", "summary"])
def test_a_full_or_read_only_out_mid_run_is_one_clear_error_and_resumes(tmp_path, capsys, monkeypatch, fail_at):
    """The disk fills (ENOSPC) while the third sequence is committed, or while the summary is written: one
    message, exit 5, no traceback; what was committed before is kept and a rerun finishes the run (issue 11
    item 8)."""
    import errno
    import os

    from skillrise_gym.bench.cli import EXIT_OUTPUT

    out = tmp_path / "run"
    full = OSError(errno.ENOSPC, "No space left on device")
    if fail_at == "turns":  # the store appends with os.write: fail the third append to turns.jsonl
        real_write, calls = os.write, {"n": 0}

        def write(fd, data):
            if os.readlink(f"/proc/self/fd/{fd}") == str(out / "turns.jsonl"):
                calls["n"] += 1
                if calls["n"] >= 3:
                    raise full
            return real_write(fd, data)

        monkeypatch.setattr(os, "write", write)
    else:  # summaries are written atomically (a temporary file renamed into place)
        import skillrise_gym.bench.store as store

        real_atomic = store.atomic_write

        def atomic(path, text, **kwargs):
            if Path(path).name == "summary.json":
                raise full
            return real_atomic(path, text, **kwargs)

        monkeypatch.setattr(store, "atomic_write", atomic)
    code = bench(out, K=(1,), n=4, agent="random")
    err = capsys.readouterr().err
    assert code == EXIT_OUTPUT
    assert "No space left on device" in err and "re-run the same command to resume" in err
    assert "Traceback" not in err
    assert len(results(out)) == (4 if fail_at == "summary" else 2)
    monkeypatch.undo()
    assert bench(out, K=(1,), n=4, agent="random") == 0
    assert_consistent(out, {(1, i) for i in range(4)})


def test_overlapped_play_records_the_same_sequences_as_rounds(tmp_path):
    """--overlap (envs step in their workers while the agent answers for others: the trainer's player) changes
    when calls happen, never what a sequence records."""
    def played(out: Path) -> dict[str, list[tuple]]:
        by: dict[str, list[tuple]] = {}
        for t in read_turns(out / "turns.jsonl"):
            by.setdefault(t.trial_id, []).append((t.position, t.role, t.prompt, t.response, t.reward))
        return by

    common = ["--env", "toy", "--agent", "random", "--K", "3", "--num-sequences", "5", "--no-progress", "--no-plots"]
    assert main([*common, "--env-workers", "0", "--out", str(tmp_path / "rounds")]) == 0
    assert main([*common, "--env-workers", "2", "--envs", "3", "--overlap", "--out", str(tmp_path / "overlap")]) == 0
    rounds, overlapped = played(tmp_path / "rounds"), played(tmp_path / "overlap")
    assert len(rounds) == 5 and rounds == overlapped
    assert [r["success"] for r in sorted(results(tmp_path / "rounds"), key=lambda r: r["index"])] == \
        [r["success"] for r in sorted(results(tmp_path / "overlap"), key=lambda r: r["index"])]
