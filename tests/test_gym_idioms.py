"""Gymnasium idioms (issue 11, item 14): async vector envs with their default shared memory, pickling and
deep copies (WebShop after reset continues identically; engines that cannot be copied say what and why),
and the render metadata."""

from __future__ import annotations

import copy
import pickle

import gymnasium as gym
import numpy as np
import pytest

import skillrise_gym  # noqa: F401  (registers the env ids)
from skillrise_gym.spaces import SharedTexts, TextList, TextSpace


def _same(a, b) -> bool:
    return all(np.array_equal(a[k], b[k]) if isinstance(a[k], np.ndarray) else tuple(a[k]) == tuple(b[k]) for k in a)


def test_async_make_vec_with_shared_memory_plays_like_sync():
    answers = [("<action>red bin</action>", "<action>blue bin</action>", "<action>green bin</action>"),
               ("<skill>metal goes in the red bin</skill>",) * 3, ("<action>red bin</action>",) * 3]
    envs = {mode: gym.make_vec("SkillRise-Rulebook-v0", num_envs=3, vectorization_mode=mode, K=2)
            for mode in ("sync", "async")}
    try:
        first = {mode: env.reset(seed=5)[0] for mode, env in envs.items()}
        assert _same(first["sync"], first["async"]) and isinstance(first["async"]["prompt"], tuple)
        assert first["async"]["admissible_actions"][0] == ("red bin", "blue bin", "green bin", "yellow bin")
        for action in answers:
            steps = {mode: env.step(action) for mode, env in envs.items()}
            assert _same(steps["sync"][0], steps["async"][0])
            for part in (1, 2, 3):
                assert np.array_equal(steps["sync"][part], steps["async"][part])
    finally:
        for env in envs.values():
            env.close()


def test_shared_text_slots_round_trip_and_refuse_what_does_not_fit():
    import multiprocessing as mp

    from gymnasium.vector.utils import create_shared_memory, read_from_shared_memory, write_to_shared_memory

    text, items = TextSpace(16), TextList(TextSpace(16), shared_bytes=64)
    text_buffer, items_buffer = (create_shared_memory(space, n=2, ctx=mp) for space in (text, items))
    write_to_shared_memory(text, 1, "héllo\n\udcff", text_buffer)
    write_to_shared_memory(items, 0, ("go north", "ünïcode"), items_buffer)
    live = read_from_shared_memory(text, text_buffer, n=2)
    assert isinstance(live, SharedTexts) and tuple(live) == ("", "héllo\n\udcff")
    snapshot = copy.deepcopy(live)  # what AsyncVectorEnv(copy=True) hands out
    write_to_shared_memory(text, 1, "changed", text_buffer)
    assert snapshot == ("", "héllo\n\udcff") and live[1] == "changed"  # the view is live, the copy is not
    assert tuple(read_from_shared_memory(items, items_buffer, n=2)) == (("go north", "ünïcode"), ())
    with pytest.raises(ValueError, match="shared_memory': False"):
        write_to_shared_memory(text, 0, "x" * 17, text_buffer)


def test_webshop_env_pickles_and_deep_copies_after_reset_and_continues_identically():
    pytest.importorskip("bm25s")
    env = gym.make("SkillRise-WebShop-v0", backend_options={"num_products": 60}, seed=0)
    try:
        env.reset(seed=3)
        env.step("<action>search[green tea]</action>")
        copies = [copy.deepcopy(env), pickle.loads(pickle.dumps(env))]
        assert copies[0].unwrapped.backend.shop is env.unwrapped.backend.shop  # one read-only shop per process
        for action in ("<action>click[next >]</action>", "<action>click[< prev]</action>"):
            results = [e.step(action) for e in [env, *copies]]
            for other in results[1:]:
                assert other[0]["observation"] == results[0][0]["observation"] and other[1:3] == results[0][1:3]
    finally:
        env.close()


@pytest.mark.parametrize("benchmark, message", [
    ("scienceworld", "a JVM in another process"),
    ("alfworld", "a live engine"),
])
def test_envs_whose_engine_cannot_be_copied_say_what_and_why(benchmark, message, tmp_path):
    from types import SimpleNamespace

    from skillrise_gym.backends import backend_class

    cls = backend_class(benchmark)
    backend = cls.__new__(cls)  # the guard alone: no engine started
    engine = SimpleNamespace(jvm=None)  # ScienceWorld's engine adapter before its JVM starts
    backend.__dict__.update({"_sim": engine, "_game": None})
    assert pickle.loads(pickle.dumps(backend)).__dict__ == backend.__dict__  # before reset: fine
    # what reset leaves there: a JVM handle, a TextWorld game
    if benchmark == "scienceworld":
        engine.jvm = object()
    else:
        backend._game = object()
    for attempt in (pickle.dumps, copy.deepcopy):
        with pytest.raises(TypeError, match=f"cannot be pickled or copied once reset: .*{message}.*gym.make"):
            attempt(backend)


def test_metadata_declares_render_modes_and_fps():
    env = gym.make("SkillRise-Rulebook-v0", render_mode="ansi")
    assert env.metadata["render_fps"] == 1 and "ansi" in env.metadata["render_modes"]
    env.reset(seed=0)
    assert "sort" in env.render()
