"""The update's masked attention on a CPU (skillrise_train/attention.py): blocks of queries that skip the keys
the mask hides, grouped heads read natively; the same outputs and gradients as transformers' SDPA, and the
same update."""

from __future__ import annotations

import contextlib
import types

import pytest
import torch

from skillrise_train import attention
from skillrise_train.attention import masked_sdpa, query_blocks, update_attention

transformers = pytest.importorskip("transformers")
from transformers.integrations.sdpa_attention import sdpa_attention_forward  # noqa: E402


def _qkv(batch: int, queries: int, keys: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    shape = lambda heads, n: (batch, heads, n, 16)  # noqa: E731
    return [torch.randn(shape(h, n), generator=g, requires_grad=True)
            for h, n in ((6, queries), (2, keys), (2, keys))]


def _module() -> torch.nn.Module:
    module = torch.nn.Module()
    module.num_key_value_groups = 3  # 6 query heads over 2 key/value heads
    return module


def _causal_mask(batch: int, queries: int, keys: int, pads: list[int]) -> torch.Tensor:
    """Queries on top of `keys - queries` earlier keys (a cache), causal, each batch row's first `pad` keys
    hidden (left padding); every query still sees its own key, as transformers keeps padding rows finite."""
    q = torch.arange(queries)[:, None] + keys - queries
    k = torch.arange(keys)[None, :]
    mask = (k <= q)[None, None].repeat(batch, 1, 1, 1)
    for row, pad in enumerate(pads):
        mask[row, :, :, :pad] = False
    mask |= (k == q)[None, None]
    return mask


def _both(mask: torch.Tensor, batch: int, queries: int, keys: int):
    results = []
    for function in (sdpa_attention_forward, masked_sdpa):
        q, k, v = _qkv(batch, queries, keys)
        out, _ = function(_module(), q, k, v, mask, scaling=0.25)
        (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
        results.append((out.detach(), q.grad, k.grad, v.grad))
    return results


@pytest.mark.parametrize("queries,keys", [(1100, 1300), (700, 700)])
def test_blocks_skip_hidden_keys_and_match_sdpa(queries, keys):
    mask = _causal_mask(2, queries, keys, pads=[0, 40])
    blocks = query_blocks(mask)
    assert len(blocks) == -(-queries // attention.QUERY_BLOCK)
    # the first block sees its rows' keys only: the causal triangle past them is skipped
    assert blocks[0][3] == keys - queries + attention.QUERY_BLOCK < keys
    assert blocks[-1][3] == keys
    plain, ours = _both(mask, 2, queries, keys)
    for a, b in zip(plain, ours):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)


def test_any_mask_pattern_matches_sdpa():
    """Not only causal masks: a random pattern whose blocks hide a band of leading and trailing keys."""
    g = torch.Generator().manual_seed(3)
    queries, keys = 600, 900
    mask = torch.rand((1, 1, queries, keys), generator=g) < 0.3
    mask[:, :, :, :50] = False
    mask[:, :, :attention.QUERY_BLOCK, 800:] = False
    mask[:, :, :, 60] = True  # every row sees a key
    assert query_blocks(mask)[0][2:] == (50, 800)
    plain, ours = _both(mask, 1, queries, keys)
    for a, b in zip(plain, ours):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)


def test_blocks_are_read_once_per_mask_and_a_blind_block_keeps_every_key():
    mask = torch.zeros((1, 1, 4, 8), dtype=torch.bool)
    mask[:, :, 2:, 3:5] = True
    blocks = query_blocks(mask, block=2)
    assert blocks == [(0, 2, 0, 8), (2, 4, 3, 5)]
    assert query_blocks(mask, block=2) is blocks  # the same mask (the next layer): not read again
    other = mask.clone()
    assert query_blocks(other, block=2) is not blocks


def test_other_inputs_take_transformers_sdpa(monkeypatch):
    calls = []
    import transformers.integrations.sdpa_attention as sdpa

    monkeypatch.setattr(sdpa, "sdpa_attention_forward", lambda *a, **k: calls.append(a[4]) or ("plain", None))
    q, k, v = _qkv(1, 8, 8)
    assert masked_sdpa(_module(), q, k, v, None)[0] == "plain"  # no mask: SDPA's causal kernel
    float_mask = torch.zeros((1, 1, 8, 8))
    assert masked_sdpa(_module(), q, k, v, float_mask)[0] == "plain"
    assert len(calls) == 2


def test_update_attention_switches_and_restores_only_sdpa_on_cpu():
    model = torch.nn.Linear(2, 2)
    model.config = types.SimpleNamespace(_attn_implementation="sdpa")
    with update_attention(model):
        assert model.config._attn_implementation == attention.NAME
    assert model.config._attn_implementation == "sdpa"
    with pytest.raises(ValueError), update_attention(model):
        raise ValueError("inside")
    assert model.config._attn_implementation == "sdpa"
    model.config._attn_implementation = "eager"
    with update_attention(model):
        assert model.config._attn_implementation == "eager"


@pytest.fixture(scope="module")
def trainer(tmp_path_factory):
    trl = pytest.importorskip("trl")  # noqa: F841
    from skillrise_train.config import TrainConfig
    from skillrise_train.trainer import SkillRiseTrainer

    out = tmp_path_factory.mktemp("attention")
    import os

    os.environ.setdefault("SKILLRISE_CACHE", str(out / "cache"))
    config = TrainConfig(env="toy", model="tiny", lora=True, K=2, G=2, S=1, output_dir=str(out), steps=1,
                         epsilon=0.2, entropy_coef=0.01)
    trainer = SkillRiseTrainer.from_config(config)
    trainer.current_gradient_accumulation_steps = 1
    trainer.model.train()
    yield trainer
    trainer.rollout.close()


@pytest.mark.parametrize("share", [False, True], ids=["padded", "shared"])
def test_the_update_is_unchanged(trainer, share, monkeypatch):
    """The trainer's update on long rows (left-padded micro-batches, or rows on shared prefixes): the same loss
    and gradients with masked_sdpa as with transformers' SDPA, and masked_sdpa did run in blocks."""
    import skillrise_train.trl_adapter as adapter

    model = trainer.model
    g = torch.Generator().manual_seed(5)
    vocab = model.config.vocab_size
    head = torch.randint(3, vocab, (300,), generator=g).tolist()
    prompts = [head + torch.randint(3, vocab, (n,), generator=g).tolist() for n in (700, 520, 90)]
    completions = [torch.randint(3, vocab, (n,), generator=g).tolist() for n in (5, 8, 3)]
    batch = trainer.rows_to_batch(prompts, completions, [1.0, -0.5, 2.0])
    saved = (trainer.config.share_prefixes, trainer.config.micro_batch_tokens)
    results = {}
    try:
        trainer.config.share_prefixes, trainer.config.micro_batch_tokens = share, 0
        for ours in (False, True):
            if not ours:
                monkeypatch.setattr(adapter, "update_attention", lambda model: contextlib.nullcontext())
            else:
                monkeypatch.undo()
                attention._last_blocks = None
            model.zero_grad()
            loss = trainer.compute_loss(model, batch)
            loss.backward()
            results[ours] = (loss.item(), torch.cat([p.grad.flatten() for p in model.parameters()
                                                     if p.grad is not None]).clone())
    finally:
        trainer.config.share_prefixes, trainer.config.micro_batch_tokens = saved
        model.zero_grad()
    assert attention._last_blocks is not None and len(attention._last_blocks[2]) >= 2  # blocks ran
    assert model.config._attn_implementation == "sdpa"
    assert results[True][0] == pytest.approx(results[False][0], rel=1e-5, abs=1e-6)
    torch.testing.assert_close(results[True][1], results[False][1], rtol=1e-4, atol=1e-6)
    assert results[True][1].abs().sum() > 0
