"""Our fast step against the stock `scienceworld.ScienceWorldEnv.step` on gold replays.

Both JVMs run with -XX:hashCode=2 (the stock one through JAVA_TOOL_OPTIONS, since it takes no JVM options).
Observations, scores, done flags and move counts must match step for step. Tasks whose ticks draw from the
simulator's RNG (grow-fruit, mendelian genetics) are left out on purpose: the stock step computes the
valid-action list on every step, which draws from that RNG, and our convention is that asking for the
list never changes the world (see test_scienceworld_backend.py).
"""

from __future__ import annotations

import pytest

pytest.importorskip("scienceworld")
pytest.importorskip("psutil")  # the no-JVM-left check (conftest) needs it

from skillrise_gym.backends.scienceworld import ScienceWorldBackend  # noqa: E402

TASKS = ("power-component", "use-thermometer", "find-living-thing", "chemistry-mix", "identify-life-stages-2",
         "test-conductivity-of-unknown-substances")



@pytest.fixture(scope="module")
def stock():
    from scienceworld import ScienceWorldEnv

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("JAVA_TOOL_OPTIONS", "-XX:+UnlockExperimentalVMOptions -XX:hashCode=2 -Xmx1g")
        env = ScienceWorldEnv("", envStepLimit=10**6)
    yield env
    env.close()
    env.close = lambda: None  # the stock __del__ closes again and hits a broken pipe


@pytest.fixture(scope="module")
def ours():
    backend = ScienceWorldBackend()
    yield backend
    backend.close()


@pytest.mark.parametrize("name", TASKS)
def test_fast_step_matches_stock_step(stock, ours, name):
    task = [t for t in ours.list_tasks("dev") if t.payload["task_name"] == name][-1]
    variation = task.payload["variation"]
    gold = ours.gold_actions(name, variation)
    assert gold

    stock.load(name, variation, "easy")
    stock_obs, stock_info = stock.reset()
    first = ours.reset(task)
    assert first.observation == stock_obs
    assert first.info["moves"] == stock_info["moves"] and first.score == stock_info["score"]
    assert ours.task_description() == stock.get_task_description()

    for action in gold:
        obs, _reward, done, info = stock.step(action)
        mine = ours.step(action)
        assert (mine.observation, mine.score, mine.done, mine.info["moves"]) == (obs, info["score"], done, info["moves"]), action
        if done:
            break
    assert mine.success and mine.done


def test_odd_inputs_match_stock_step(stock, ours):
    """Inputs the engine's wrapper answers itself, unknown and empty inputs, and a failing focus."""
    task = [t for t in ours.list_tasks("dev") if t.payload["task_name"] == "boil"][0]
    stock.load("boil", task.payload["variation"], "easy")
    stock.reset()
    ours.reset(task)
    for action in ("help", "objects", " Task ", "", "dance", "inventory", "look at agent", "wait1", "focus on agent"):
        obs, _reward, done, info = stock.step(action)
        mine = ours.step(action)
        assert (mine.observation, mine.score, mine.done, mine.info["moves"]) == (obs, info["score"], done, info["moves"]), action
