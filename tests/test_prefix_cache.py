"""Prefix reuse in generation (skillrise_gym/prefix_cache.py): a prompt that starts like a stored one
prefills only the rest, and generates what a full prefill generates."""

from __future__ import annotations

import pytest
import torch

from skillrise_gym.models import build_tiny_model, load_model_and_tokenizer
from skillrise_gym.prefix_cache import PrefixCache, prefilled, supports


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = build_tiny_model(tmp_path_factory.mktemp("tiny_prefix"))
    model, tokenizer = load_model_and_tokenizer(str(path), dtype=torch.float32)
    model.eval()
    return model, tokenizer


def _padded(prompts, pad):
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[pad] * (width - len(p)) + list(p) for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    return ids, mask


def _generate(model, prompts, pad, cache=None, new=10):
    """Greedy tokens and every step's logits (the tiny random model's greedy tokens barely depend on its
    context, so the logits are what shows a wrong key or position)."""
    from transformers import GenerationConfig

    ids, mask = _padded(prompts, pad)
    config = GenerationConfig(max_new_tokens=new, min_new_tokens=new, do_sample=False, pad_token_id=pad,
                              output_logits=True, return_dict_in_generate=True)
    extra = {"cache": cache} if cache is not None else {}
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, generation_config=config, **extra)
    return out.sequences[:, ids.size(1):].tolist(), torch.stack(out.logits)


def _turns(seed=0):
    """Three calls of a two-trial batch whose prompts grow like an agent's: a shared header, then each
    trial's own turns appended (and one trial's observation rewritten mid-prompt, which breaks its prefix)."""
    g = torch.Generator().manual_seed(seed)

    def words(n):
        return torch.randint(5, 500, (n,), generator=g).tolist()

    header = words(40)
    a, b = header + words(7), header + words(9)
    calls = [[a, b]]
    a2, b2 = a + words(15), b[:45] + words(20)  # b's tail changed: only 45 tokens shared
    calls.append([a2, b2])
    calls.append([a2 + words(11), b2 + words(3), [7]])  # a one-token prompt rides along
    return calls


def test_greedy_tokens_equal_a_full_prefill_and_the_shared_tokens_are_not_recomputed(tiny):
    model, tokenizer = tiny
    pad = tokenizer.pad_token_id
    store = PrefixCache()
    expected_reused = 0
    for n, prompts in enumerate(_turns()):
        plain, plain_logits = _generate(model, prompts, pad)
        before = store.stats.reused_tokens
        cached, cached_logits = _generate(model, prompts, pad, cache=prefilled(model, prompts, store))
        assert cached == plain, f"call {n}"
        torch.testing.assert_close(cached_logits, plain_logits, atol=1e-5, rtol=1e-5)
        # each stored prompt lacks its last token (generate runs it): call 1 reuses a (47 - 1) and 45 of b;
        # call 2 reuses both earlier prompts whole (62 - 1, 65 - 1)
        expected_reused += {0: 40, 1: 46 + 45, 2: 61 + 64}[n]
        assert store.stats.reused_tokens == expected_reused, (n, store.stats.reused_tokens - before)
    stats = store.stats
    total = sum(len(p) for call in _turns() for p in call)
    assert stats.prompt_tokens == total
    # every token is either reused, computed here, or the last one (generate runs it)
    assert stats.reused_tokens + stats.computed_tokens + sum(len(c) for c in _turns()) == total
    assert stats.reused_share == pytest.approx(expected_reused / total)


def test_a_prompt_extending_a_stored_one_replaces_it_and_the_budget_evicts_the_least_recent(tiny):
    model, _tokenizer = tiny
    store = PrefixCache()
    base = list(range(10, 40))
    prefilled(model, [base], store)
    assert [len(e.ids) for e in store.entries] == [29]
    prefilled(model, [base + [41, 42, 43]], store)  # extends the stored prompt: it replaces it
    assert [len(e.ids) for e in store.entries] == [32]
    prefilled(model, [list(range(100, 130))], store)  # unrelated: a second entry
    assert len(store.entries) == 2
    one = store.entries[0].nbytes
    small = PrefixCache(max_bytes=one + one // 2)
    prefilled(model, [base + [41, 42, 43]], small)
    prefilled(model, [list(range(100, 133))], small)  # over budget: the older entry goes
    assert [e.ids[0] for e in small.entries] == [100]
    tiny_budget = PrefixCache(max_bytes=10)
    prefilled(model, [base], tiny_budget)  # larger than the whole budget: not stored
    assert tiny_budget.entries == [] and tiny_budget.stats.computed_tokens == 29


def test_models_whose_cache_is_not_full_attention_are_not_spliced(tiny):
    model, _ = tiny
    assert supports(model)

    class Config:
        is_encoder_decoder = False
        layer_types = ["full_attention", "sliding_attention"]

    class Model:
        config = Config()

    assert not supports(Model())
    Config.layer_types = None
    Config.sliding_window = 128
    assert not supports(Model())
    with pytest.raises(ValueError, match="non-empty"):
        prefilled(model, [[]], PrefixCache())


def test_the_hf_agent_answers_the_same_with_the_cache_and_reuses_a_tasks_earlier_turns(tiny):
    from skillrise_gym.agents.hf_agent import HFAgent, HFConfig

    model, tokenizer = tiny
    header = "You are an agent. Skills: keep the red key. Task: open the door. "
    turns = [[header + "Now: a hall.", header + "Now: a kitchen with a table."],
             [header + "Now: a hall. Did: look -> a door", header + "Now: a kitchen with a table. Did: go east"]]
    answers = {}
    for mb in (0, 64):
        agent = HFAgent(HFConfig(model="tiny", max_new_tokens=6, prefix_cache_mb=mb, threads=1), model, tokenizer)
        answers[mb] = [[o.text for o in agent.generate(prompts)] for prompts in turns]
        if mb:
            stats = agent.prefix_cache.stats
            assert stats.reused_tokens > stats.computed_tokens  # the second turn reuses the first's prompt
        else:
            assert agent.prefix_cache is None
    assert answers[0] == answers[64]
    with pytest.raises(ValueError, match="prefix_cache_mb"):
        HFAgent(HFConfig(model="tiny", prefix_cache_mb=-1), model, tokenizer)


trl = pytest.importorskip("trl")


def test_the_trainer_generates_the_same_tokens_with_the_cache_and_reports_what_it_spared(tmp_path):
    from skillrise_train.config import TrainConfig
    from skillrise_train.trainer import SkillRiseTrainer

    config = TrainConfig(env="toy", model="tiny", lora=True, K=2, G=2, S=1, output_dir=str(tmp_path), steps=1,
                         temperature=1.0, threads=1, max_new_tokens=12)
    trainer = SkillRiseTrainer.from_config(config)
    try:
        assert trainer.prefix_cache_bytes == 1024 << 20  # on by default
        calls = [[trainer.encode_prompt(t)[0] for t in texts] for texts in (
            ("find the red key", "find the red key and then open the door"),
            ("find the red key. Did: go north -> a hall", "find the red key and then open the door. Did: look"))]
        seeds = [[1, 2], [3, 4]]

        def run():
            with trainer.generation_weights():
                out = [trainer.generate_ids(p, s) for p, s in zip(calls, seeds)]
                stats = trainer._prefix_cache.stats if trainer._prefix_cache is not None else None
            return out, stats

        trainer._metrics["train"].clear()
        cached, stats = run()
        assert stats is not None and stats.reused_tokens > 0
        assert trainer._metrics["train"]["generation/prompt_reused"] == [stats.reused_share]
        assert trainer._prefix_cache is None  # dropped with the block
        trainer.prefix_cache_bytes = 0
        plain, none = run()
        assert none is None and plain == cached
    finally:
        trainer.rollout.close()


def test_the_config_refuses_a_negative_budget():
    from skillrise_train.config import TrainConfig

    with pytest.raises(ValueError, match="prefix_cache_mb"):
        TrainConfig(env="toy", prefix_cache_mb=-1)
