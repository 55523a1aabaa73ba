"""ScienceWorld backend on the real simulator: tasks and splits, bad input, scoring, RNG convention, expert.

One JVM serves the whole module (module-scoped fixture, closed at teardown); the last check of the module
asserts that no JVM child process is left.
"""

from __future__ import annotations

import os

import pytest

pytest.importorskip("scienceworld")
pytest.importorskip("psutil")  # the no-JVM-left check (conftest) needs it

from skillrise_gym import prompts  # noqa: E402
from skillrise_gym.backends import EngineError, MissingDependencyError, make_backend  # noqa: E402
from skillrise_gym.backends.scienceworld import ScienceWorldBackend  # noqa: E402
from skillrise_gym.backends.scienceworld.backend import UNKNOWN_ACTION  # noqa: E402
from skillrise_gym.backends.scienceworld.jvm import JavaNotFoundError, find_java  # noqa: E402
from skillrise_gym.tasks import Task  # noqa: E402



@pytest.fixture(scope="module")
def backend():
    backend = ScienceWorldBackend()
    yield backend
    backend.close()


def task(backend: ScienceWorldBackend, name: str, split: str = "test", index: int = 0) -> Task:
    return [t for t in backend.list_tasks(split) if t.payload["task_name"] == name][index]


def play_gold(backend: ScienceWorldBackend, t: Task, admissible_every_step: bool = False):
    trace = [backend.reset(t).observation]
    result = None
    while (action := backend.expert_action()) is not None:
        if admissible_every_step:
            assert backend.admissible_actions()
        result = backend.step(action)
        trace.append((result.observation, result.score, result.done))
        if result.done:
            break
    return result, trace


# ---------------------------------------------------------------------------------------------- java
def test_missing_java_raises_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.delenv("SCIWORLD_JAVA_HOME", raising=False)
    with pytest.raises(JavaNotFoundError) as err:
        find_java()
    message = str(err.value)
    assert "openjdk-17-jre-headless" in message and "JAVA_HOME" in message
    with pytest.raises(MissingDependencyError, match="JAVA_HOME"):
        ScienceWorldBackend()
    # A JAVA_HOME without java is reported too, not silently skipped.
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "nojava"))
    with pytest.raises(JavaNotFoundError, match="nojava"):
        find_java()


def test_java_home_is_honoured(monkeypatch, tmp_path):
    real = find_java()
    home = tmp_path / "jdk"
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "java").symlink_to(real)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("SCIWORLD_JAVA_HOME", str(home))
    assert find_java() == str(home / "bin" / "java")


# ---------------------------------------------------------------------------------------------- tasks
def test_tasks_and_splits(backend):
    assert backend.benchmark == "scienceworld" and backend.splits == ("train", "dev", "test")
    assert backend.default_max_task_steps == 30 and backend.admissible_by_default is False
    by_split = {split: backend.list_tasks(split) for split in backend.splits}
    assert sum(len(v) for v in by_split.values()) == 7207
    ids = [t.id for tasks in by_split.values() for t in tasks]
    assert len(ids) == len(set(ids)), "a variation appears in two splits"
    assert {t.family for t in by_split["test"]} == {t.payload["task_name"] for t in by_split["test"]}
    assert len({t.family for t in by_split["test"]}) == 30
    first = by_split["test"][0]
    assert first.id == f"{first.payload['task_name']}-{first.payload['variation']}"
    assert first.payload["simplifications"] == "easy" and first.difficulty > 0
    assert backend.list_tasks("test") == by_split["test"], "listing is deterministic"
    with pytest.raises(ValueError, match="unknown split"):
        backend.list_tasks("valid")


def test_topic_families_and_task_subset():
    with make_backend("scienceworld", family="topic", tasks=["boil", "grow-plant", "lifespan-longest-lived"]) as b:
        tasks = b.list_tasks("dev")
        assert {t.family for t in tasks} == {"Matter", "Biology"}
        assert {t.payload["task_name"] for t in tasks} == {"boil", "grow-plant", "lifespan-longest-lived"}
        assert b.jvm_pid is None or b.jvm_pid > 0
    from skillrise_gym.backends.scienceworld import catalog

    assert len(set(catalog.task_topics().values())) == 7 and len(catalog.task_topics()) == 30  # the docs' counts


def test_bad_options_and_task_names():
    with pytest.raises(ValueError, match="unknown ScienceWorld task 'boiling'"):
        ScienceWorldBackend(tasks=["boiling"])
    with pytest.raises(ValueError, match="simplification"):
        ScienceWorldBackend(simplifications="easy,fast")
    with pytest.raises(ValueError, match="family"):
        ScienceWorldBackend(family="colour")


@pytest.mark.parametrize(
    "payload, match",
    [
        ({"task_name": "no-such-task", "variation": 0}, "unknown ScienceWorld task"),
        ({"task_name": "boil", "variation": 30}, r"out of range .*0\.\.29"),
        ({"task_name": "boil", "variation": -1}, "out of range"),
        ({"task_name": "boil", "variation": "3"}, "must be an int"),
        ({"variation": 3}, "task_name"),
        ({"task_name": "power-component", "variation": 0, "simplifications": "noElectricalAction"}, "electrical"),
    ],
)
def test_bad_tasks_are_refused_clearly(backend, payload, match):
    bad = Task(benchmark="scienceworld", id="bad", family="x", difficulty=1.0, split="test", payload=payload)
    with pytest.raises(ValueError, match=match):
        backend.reset(bad)


def test_engine_refusal_is_translated(backend):
    """If a bad variation reaches the engine, its error string/Java exception becomes a ValueError."""
    with pytest.raises(ValueError, match="exceeds the total number of variations"):
        backend._load("boil", 5000, "easy")


# ---------------------------------------------------------------------------------------------- playing
def test_gold_expert_solves_short_tasks(backend):
    for name in ("lifespan-longest-lived", "find-non-living-thing", "chemistry-mix-paint-secondary-color"):
        result, _ = play_gold(backend, task(backend, name, "test", 3))
        assert result.done and result.success and result.score == 100.0
        assert result.info["score_raw"] == 100 and result.info["score01"] == 1.0


def test_bad_actions_and_wrong_focus(backend):
    first = backend.reset(task(backend, "find-plant", "dev"))
    assert first.observation.startswith("This room is called") and not first.done
    assert "find" in backend.task_description().lower()
    moves, score = first.info["moves"], first.score
    for action in ("", "   ", "dance wildly", "x" * 100_000, "look around\nopen door", "é€🙂"):
        result = backend.step(action)
        assert result.observation == UNKNOWN_ACTION and result.info["unknown_action"]
        assert not result.done and result.score == score and result.info["moves"] == moves
    # Focusing on something that is not the target fails the task: -100, done, not a success.
    result = backend.step("focus on agent")
    assert result.done and not result.success and result.score == -100.0
    assert result.info["failed"] and result.info["score01"] == 0.0


def test_action_grammar_lists_templates_and_objects(backend):
    backend.reset(task(backend, "boil", "dev"))
    templates, objects = backend.action_templates()
    assert "open OBJ" in templates and "look around" in templates
    assert "agent" in objects or any("agent" in o for o in objects)
    grammar = backend.action_grammar()
    assert grammar.templates == tuple(templates) and grammar.objects == tuple(objects)
    help_text = prompts.render_action_grammar("scienceworld", grammar)
    assert help_text == (f"Valid_actions: {', '.join(templates)}, OBJ needs to be replaced with one of the following "
                         f"objects: {', '.join(objects)}\nexample: focus on door")
    valid = backend.admissible_actions()
    assert "look around" in valid and len(valid) > 20


def test_asking_for_admissible_actions_does_not_change_the_world(backend):
    """grow-fruit has bees, which draw from the simulator's RNG every tick; so does computing the valid list.
    Our convention restores the RNG around the list, so the trajectory is the same with or without it."""
    t = task(backend, "grow-fruit", "test")
    plain, trace_plain = play_gold(backend, t)
    asked, trace_asked = play_gold(backend, t, admissible_every_step=True)
    assert plain.success and asked.success
    assert trace_plain == trace_asked


def test_expert_stops_when_the_agent_leaves_the_gold_path(backend):
    backend.reset(task(backend, "use-thermometer", "test"))
    first = backend.expert_action()
    assert first
    backend.step("look around")
    if first != "look around":
        assert backend.expert_action() is None
    # A new reset starts the plan again.
    backend.reset(task(backend, "use-thermometer", "test"))
    assert backend.expert_action() == first


def test_gold_path_computation_mid_task_keeps_the_task_state(backend, tmp_path, monkeypatch):
    """Computing a gold path reloads the world; the backend replays the task so the agent sees no change."""
    monkeypatch.setenv("SKILLRISE_CACHE", str(tmp_path))  # nothing cached: the path is computed now
    backend.reset(task(backend, "measure-melting-point-known-substance", "dev", 1))
    before = [backend.step(a).observation for a in ("open door to kitchen", "go to kitchen")]
    expert = backend.expert_action()  # triggers the computation (and the replay)
    assert expert is None or isinstance(expert, str)
    after = backend.step("look around")
    assert after.observation.startswith("This room is called") and before
    assert any(p.name.endswith(".json") for p in tmp_path.rglob("*.json")), "gold path cached on disk"


def test_stepping_without_a_task(backend):
    fresh = ScienceWorldBackend()
    with pytest.raises(RuntimeError, match="reset"):
        fresh.step("look around")
    assert fresh.action_grammar() is None and fresh.expert_action() is None
    fresh.close()
    fresh.close()  # idempotent


def test_difficulty_uses_cached_gold_lengths(tmp_path, monkeypatch):
    monkeypatch.setenv("SKILLRISE_CACHE", str(tmp_path))
    with ScienceWorldBackend(tasks=["lifespan-shortest-lived"], difficulty="cached") as b:
        tasks = b.list_tasks("dev")
        # fallback: the task's typical gold length, plus variation/10000 to keep variation order
        assert [t.difficulty for t in tasks] == [4 + t.payload["variation"] / 10000 for t in tasks]
        assert sorted(tasks, key=lambda t: t.difficulty) == tasks
        gold = b.gold_actions("lifespan-shortest-lived", tasks[1].payload["variation"])
        again = b.list_tasks("dev")
        assert again[1].difficulty == float(len(gold)) and again[0].difficulty == tasks[0].difficulty
    with ScienceWorldBackend(tasks=["lifespan-shortest-lived"], difficulty="fallback") as b:
        assert [t.difficulty for t in b.list_tasks("dev")] == [t.difficulty for t in tasks]


def test_engine_error_class_is_exported():
    assert issubclass(EngineError, RuntimeError)
    assert os.environ.get("SKILLRISE_CACHE")  # conftest isolates the cache


def test_data_tool_reports_and_precomputes(capsys, tmp_path, monkeypatch):
    from skillrise_gym.data_cli import main

    monkeypatch.setenv("SKILLRISE_CACHE", str(tmp_path))
    assert main(["scienceworld", "--tasks", "power-component", "--precompute-difficulty", "--split", "dev",
                 "--limit", "2"]) == 0
    out = capsys.readouterr().out
    assert "java:" in out and "scienceworld: 1.2.3" in out and "computed 2 gold paths" in out
    assert main(["scienceworld", "--tasks", "power-component"]) == 0
    assert "0/2/0" in capsys.readouterr().out  # 2 dev gold paths cached now
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.delenv("SCIWORLD_JAVA_HOME", raising=False)
    assert main(["scienceworld"]) == 1
    assert "openjdk" in capsys.readouterr().out


def test_a_step_result_is_read_from_its_printed_tuple():
    """The fast step reads `AgentInterface.step`'s Scala tuple in one round trip, as its string: the
    observation may hold commas and parentheses, the score and the flag are split off the right."""
    from skillrise_gym.backends.scienceworld.engine import EMPTY_OBSERVATION, parse_step_result

    assert parse_step_result("(You see: a cup (empty), a table, and 2 doors.,0.25,false)") == (
        "You see: a cup (empty), a table, and 2 doors.", 0.25, False)
    assert parse_step_result("(done,1.0,true)") == ("done", 1.0, True)
    assert parse_step_result("(x,1.0E-4,false)")[1] == pytest.approx(1e-4)
    assert parse_step_result("(,-1.0,false)") == (EMPTY_OBSERVATION, -1.0, False)
    assert parse_step_result("(null,0.0,false)")[0] == EMPTY_OBSERVATION
    for bad in (None, "", "no tuple", "(a,b)", "(a,0.5,maybe)", "(a,half,true)"):
        with pytest.raises(EngineError, match="unexpected step result"):
            parse_step_result(bad)


def test_the_wrapper_sees_the_fast_steps_score_before_it_answers(backend):
    """Fast steps leave the wrapper's score field to be written when the wrapper is next used: a long
    action (answered from the wrapper's score) and the wrapper's own commands report the score the fast
    steps reached."""
    backend.reset(task(backend, "chemistry-mix-paint-secondary-color", "test", 3))
    score = None
    while (action := backend.expert_action()) is not None:
        result = backend.step(action)
        if 0 < result.score < 100:
            score = result.score
            break
    assert score is not None, "no partial credit on the gold path"
    for action in ("x" * 100_000, "task"):  # answered from the wrapper's score field
        result = backend.step(action)
        assert result.score == score and not result.done, action[:20]
