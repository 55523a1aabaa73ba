"""TRL's loss on one batch of SkillRise rows equals a direct clipped-loss computation; only completion
positions are scored, with the same numbers as TRL's own log-prob path; padding rows change nothing."""

from __future__ import annotations

import pytest
import torch

from skillrise_train.config import TrainConfig

trl = pytest.importorskip("trl")

from trl import GRPOTrainer  # noqa: E402

from skillrise_train.trainer import SkillRiseTrainer  # noqa: E402


@pytest.fixture(scope="module")
def trainer(tmp_path_factory):
    out = tmp_path_factory.mktemp("loss")
    config = TrainConfig(env="toy", model="tiny", lora=False, K=2, G=2, S=1, output_dir=str(out), steps=1,
                         epsilon=0.2, dual_clip=3.0, entropy_coef=0.01, temperature=0.9)
    import os

    os.environ.setdefault("SKILLRISE_CACHE", str(out / "cache"))
    trainer = SkillRiseTrainer.from_config(config)
    trainer.current_gradient_accumulation_steps = 1  # set by Trainer.train's loop; one micro-batch here
    trainer.model.train()
    yield trainer
    trainer.rollout.close()


def _rows(vocab: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(3, vocab, (n,), generator=g).tolist() for n in (40, 25, 57, 31, 12)]
    completions = [torch.randint(3, vocab, (n,), generator=g).tolist() for n in (6, 9, 3, 1, 7)]
    advantages = [1.5, -2.0, 0.3, -0.7, 4.0]
    return prompts, completions, advantages


def _direct_loss(trainer, model, batch, old_logps):
    """The clipped objective written out by hand, scoring the full logits of every position."""
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    attention = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    mask = batch["completion_mask"].float()
    C = batch["completion_ids"].size(1)
    logits = model(input_ids=ids, attention_mask=attention).logits[:, -C - 1 : -1, :].float() / trainer.temperature
    log_probs = torch.log_softmax(logits, dim=-1)
    logp = log_probs.gather(-1, batch["completion_ids"].unsqueeze(-1)).squeeze(-1)
    entropy = -(log_probs.exp() * log_probs).sum(-1)
    A = batch["advantages"].unsqueeze(1)
    ratio = torch.exp(logp - old_logps)
    clipped = torch.clamp(ratio, 1 - 0.2, 1 + 0.2)
    dual = torch.clamp(ratio, max=3.0)  # dual clip: the ratio never counts more than 3x
    per_token = -torch.min(dual * A, clipped * A)
    policy = (per_token * mask).sum() / mask.sum()  # token mean over the batch (loss_type dapo)
    return policy - 0.01 * (entropy * mask).sum() / mask.sum()


def test_trl_loss_equals_direct_clipped_loss(trainer):
    model = trainer.model
    prompts, completions, advantages = _rows(model.config.vocab_size)
    batch = trainer.rows_to_batch(prompts, completions, advantages)
    with torch.no_grad():
        current, _, _ = trainer._get_per_token_logps_and_entropies(
            model, torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1),
            torch.cat([batch["prompt_mask"], batch["completion_mask"]], 1), batch["completion_ids"].size(1),
        )
    # an "old" policy that differs enough for both clip sides and the dual clip to engage
    g = torch.Generator().manual_seed(1)
    old = current + torch.randn(current.shape, generator=g) * 0.8
    batch["old_per_token_logps"] = old

    model.zero_grad()
    loss_trl = trainer._compute_loss(model, batch)
    loss_trl.backward()
    grads_trl = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]).clone()

    model.zero_grad()
    loss_direct = _direct_loss(trainer, model, batch, old)
    loss_direct.backward()
    grads_direct = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]).clone()
    model.zero_grad()

    assert torch.isfinite(loss_trl)
    assert loss_trl.item() == pytest.approx(loss_direct.item(), rel=1e-5, abs=1e-6)
    cosine = torch.nn.functional.cosine_similarity(grads_trl, grads_direct, dim=0)
    assert cosine.item() > 1 - 1e-5
    torch.testing.assert_close(grads_trl, grads_direct, rtol=1e-4, atol=1e-6)
    ratio = torch.exp(current - old)[batch["completion_mask"].bool()]
    assert (ratio > 1.2).any() and (ratio < 0.8).any() and (ratio > 3.0).any()  # every branch was exercised


def test_completion_only_scoring_matches_trls_own_path(trainer):
    model = trainer.model
    prompts, completions, advantages = _rows(model.config.vocab_size, seed=3)
    batch = trainer.rows_to_batch(prompts, completions, advantages)
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1)
    attention = torch.cat([batch["prompt_mask"], batch["completion_mask"]], 1)
    keep = batch["completion_ids"].size(1)
    with torch.no_grad():
        ours, ours_entropy, _ = trainer._get_per_token_logps_and_entropies(model, ids, attention, keep, compute_entropy=True)
        stock, stock_entropy, _ = GRPOTrainer._get_per_token_logps_and_entropies(
            trainer, model, ids, attention, keep, compute_entropy=True
        )
    mask = batch["completion_mask"].bool()
    torch.testing.assert_close(ours[mask], stock[mask], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ours_entropy[mask], stock_entropy[mask], rtol=1e-5, atol=1e-5)


def test_rows_are_padded_to_a_multiple_of_the_split_with_empty_rows(trainer):
    prompts, completions, advantages = _rows(trainer.model.config.vocab_size)
    trainer.args.steps_per_generation = 4  # 5 rows -> 8: TRL's split would otherwise drop row 5 silently
    try:
        batch = trainer.rows_to_batch(prompts, completions, advantages)
    finally:
        trainer.args.steps_per_generation = 1
    assert batch["prompt_ids"].size(0) == 8
    assert batch["completion_mask"][5:].sum() == 0 and (batch["advantages"][5:] == 0).all()
    assert int(batch["num_items_in_batch"]) == sum(len(c) for c in completions)
    # padded rows do not change the loss (dapo normalises by the real completion tokens)
    batch_plain = trainer.rows_to_batch(prompts, completions, advantages)
    with torch.no_grad():
        assert trainer._compute_loss(trainer.model, batch).item() == pytest.approx(
            trainer._compute_loss(trainer.model, batch_plain).item(), rel=1e-5
        )


@pytest.mark.parametrize("loss_type", ["dapo", "grpo", "bnpo"])
def test_token_budget_micro_batches_give_the_same_loss_and_gradient(trainer, loss_type):
    model = trainer.model
    prompts, completions, advantages = _rows(model.config.vocab_size, seed=5)
    batch = trainer.rows_to_batch(prompts, completions, advantages)
    saved = (trainer.config.micro_batch_tokens, trainer.loss_type)
    results = {}
    try:
        trainer.loss_type = loss_type
        for budget in (0, 70):
            trainer.config.micro_batch_tokens = budget
            groups = trainer.pack_rows(batch)
            model.zero_grad()
            loss = trainer.compute_loss(model, batch)
            loss.backward()
            grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]).clone()
            results[budget] = (len(groups), loss.item(), grads)
    finally:
        trainer.config.micro_batch_tokens, trainer.loss_type = saved
        model.zero_grad()
    assert results[0][0] == 1 and results[70][0] >= 3  # the budget really split the batch
    assert results[70][1] == pytest.approx(results[0][1], rel=1e-5, abs=1e-6)
    torch.testing.assert_close(results[70][2], results[0][2], rtol=1e-4, atol=1e-6)


def test_auto_micro_batch_tokens_by_device(monkeypatch):
    """`--micro-batch-tokens -1`: 1024 on a CPU; on a GPU the power of two (1024..32768) that fits a quarter of
    its memory at 48 bytes per token per hidden unit and layer; the trainer resolves -1 to it."""
    from types import SimpleNamespace

    from skillrise_train.trainer import auto_micro_batch_tokens

    smollm2 = SimpleNamespace(hidden_size=576, num_hidden_layers=30)
    assert auto_micro_batch_tokens("cpu", smollm2) == 1024
    for gib, expected in ((141, 32768), (80, 16384), (24, 4096), (16, 4096), (2, 1024)):
        memory = gib * 2**30
        monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device, m=memory: SimpleNamespace(total_memory=m))
        assert auto_micro_batch_tokens("cuda:0", smollm2) == expected, gib
    # a wider, deeper model gets a smaller budget on the same GPU
    big = SimpleNamespace(hidden_size=2048, num_hidden_layers=36)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: SimpleNamespace(total_memory=80 * 2**30))
    assert auto_micro_batch_tokens("cuda:0", big) == 4096


def test_the_default_budget_resolves_on_this_device(trainer):
    assert trainer.config.micro_batch_tokens == -1 or trainer.config.micro_batch_tokens >= 0
    config_budget = trainer.config.micro_batch_tokens
    try:
        trainer.config.micro_batch_tokens = -1
        rows = 5
        batch = {"completion_mask": torch.ones(rows, 600, dtype=torch.long),
                 "prompt_mask": torch.ones(rows, 400, dtype=torch.long)}
        assert trainer.auto_micro_batch_tokens == 1024
        assert len(trainer.pack_rows(batch)) == rows  # 1000 tokens a row: one row per 1024-token pass
    finally:
        trainer.config.micro_batch_tokens = config_budget


@pytest.mark.parametrize("lora", [False, True])
def test_gradient_checkpointing_on_a_cpu_trains_to_the_same_weights(tmp_path, lora, monkeypatch):
    """--gradient-checkpointing takes effect on a CPU too (it bounds the update's memory by the longest row:
    docs/train.md) and changes no number: one training step gives the same weights as without it."""
    import contextlib

    import skillrise_train.trl_adapter as adapter

    # the blocked masked attention (attention.py) is off under checkpointing: both arms without it, as below
    monkeypatch.setattr(adapter, "update_attention", lambda model: contextlib.nullcontext())
    weights = {}
    for checkpointing in (False, True):
        config = TrainConfig(env="toy", model="tiny", lora=lora, K=2, G=2, S=1, steps=1, seed=0, lr=1e-3,
                             max_new_tokens=8, save_interval=1, record_turns=False,
                             output_dir=str(tmp_path / f"gc{checkpointing}"), gradient_checkpointing=checkpointing,
                             # shared prefixes are off with checkpointing; both arms without them, so the weights
                             # may be compared at rounding level (Adam's first step is sign-like where g ~ 0)
                             share_prefixes=False)
        trainer = SkillRiseTrainer.from_config(config)
        try:
            assert trainer.args.gradient_checkpointing is checkpointing
            before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
            trainer.train()
            inner = trainer.model.get_base_model() if lora else trainer.model
            assert inner.is_gradient_checkpointing is checkpointing
            weights[checkpointing] = {n: p.detach().clone() for n, p in trainer.model.named_parameters()
                                      if p.requires_grad}
            assert any(not torch.equal(before[n], w) for n, w in weights[checkpointing].items())  # it learned
        finally:
            trainer.rollout.close()
    assert weights[True].keys() == weights[False].keys() and weights[True]
    for name in weights[False]:
        torch.testing.assert_close(weights[True][name], weights[False][name], rtol=1e-5, atol=1e-7)
