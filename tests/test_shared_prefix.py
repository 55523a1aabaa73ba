"""The update's shared prompt prefixes (skillrise_train/shared_prefix.py): the plan's tree and micro-batches,
and the same loss and gradients as the plain update, whatever the loss type, budget and adapter."""

from __future__ import annotations

import contextlib

import pytest
import torch

from skillrise_train.config import TrainConfig
from skillrise_train.shared_prefix import plan_rows

trl = pytest.importorskip("trl")

from skillrise_train.trainer import SkillRiseTrainer  # noqa: E402


def _tokens(g: torch.Generator, n: int, vocab: int = 200) -> list[int]:
    return torch.randint(3, vocab, (n,), generator=g).tolist()


def _prompts(vocab: int = 200, seed: int = 0) -> list[list[int]]:
    """Rows shaped like a step's turns: a common head, two branches of it, rows that part inside a branch, a
    row that is the shared head plus one token, and an unrelated row."""
    g = torch.Generator().manual_seed(seed)
    head, x, y = _tokens(g, 40, vocab), _tokens(g, 20, vocab), _tokens(g, 30, vocab)
    return [
        head + x + _tokens(g, 10, vocab),  # 0
        _tokens(g, 25, vocab),  # 1: shares nothing
        head + y + _tokens(g, 5, vocab),  # 2
        head + x + _tokens(g, 12, vocab),  # 3
        head + [7],  # 4: the head plus its own last token
        head + y,  # 5: ends where the y-branch parts
        head + x + _tokens(g, 3, vocab),  # 6: few tokens of its own
    ]


def test_plan_tree_groups_and_token_counts():
    prompts = _prompts()
    plan = plan_rows(prompts, completion_width=4, budget=0)
    head, hx, hy = plan.node_of[4], plan.node_of[0], plan.node_of[2]
    assert plan.node_of[1] is None
    assert (head.start, head.end, head.parent) == (0, 40, None)
    assert (hx.start, hx.end, hx.parent) == (40, 60, head)
    assert plan.node_of[3] is hx and plan.node_of[6] is hx
    # rows 2 and 5 share head + y, but row 5 keeps its last token: the node is head + y less one token
    assert (hy.start, hy.end, hy.parent) == (40, 69, head)
    assert plan.node_of[5] is hy
    assert head.rows == 6 and hx.rows == 3 and hy.rows == 2
    # depth-first micro-batches: rows under the same node together (no budget: one batch per node)
    assert sorted(len(g) for g in plan.groups) == [1, 1, 2, 3]
    for group in plan.groups:
        assert len({id(plan.node_of[r]) for r in group}) == 1
    plain, run = plan.tokens()
    assert plain == sum(len(p) + 4 for p in prompts)
    own = sum(len(p) - (n.end if n else 0) + 4 for p, n in zip(prompts, plan.node_of))
    assert run == own + 40 + 20 + 29
    # a budget splits a node's rows (each micro-batch at least one row)
    tight = plan_rows(prompts, completion_width=4, budget=15)
    assert max(len(g) for g in tight.groups) == 1 and len(tight.groups) == len(prompts)
    # nothing shared: no nodes
    lone = plan_rows([[1, 2, 3], [4, 5, 6]], completion_width=2, budget=0)
    assert lone.node_of == [None, None] and lone.nodes == []


@pytest.fixture(scope="module", params=[False, True], ids=["full", "lora"])
def trainer(request, tmp_path_factory):
    out = tmp_path_factory.mktemp("shared")
    import os

    os.environ.setdefault("SKILLRISE_CACHE", str(out / "cache"))
    config = TrainConfig(env="toy", model="tiny", lora=request.param, K=2, G=2, S=1, output_dir=str(out), steps=1,
                         epsilon=0.2, entropy_coef=0.01, temperature=0.9)
    trainer = SkillRiseTrainer.from_config(config)
    trainer.current_gradient_accumulation_steps = 1
    trainer.model.train()
    yield trainer
    trainer.rollout.close()


def _grads(model) -> torch.Tensor:
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]).clone()


@pytest.mark.parametrize("loss_type", ["dapo", "grpo", "bnpo"])
@pytest.mark.parametrize("budget", [0, 90])
def test_shared_prefixes_give_the_same_loss_and_gradient(trainer, loss_type, budget):
    model = trainer.model
    vocab = model.config.vocab_size
    prompts = _prompts(vocab, seed=2)
    g = torch.Generator().manual_seed(9)
    completions = [_tokens(g, n, vocab) for n in (6, 9, 3, 1, 7, 4, 5)]
    advantages = [1.5, -2.0, 0.3, -0.7, 4.0, -1.0, 0.8]
    batch = trainer.rows_to_batch(prompts, completions, advantages)
    with torch.no_grad():  # an old policy apart from the current one, so both clip sides engage
        ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1)
        mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], 1)
        current = trainer.policy_logps(model, ids, mask, batch["completion_ids"].size(1))
    batch["old_per_token_logps"] = current + torch.randn(current.shape, generator=g) * 0.5
    saved = (trainer.config.micro_batch_tokens, trainer.loss_type, trainer.config.share_prefixes)
    results = {}
    try:
        trainer.loss_type = loss_type
        trainer.config.micro_batch_tokens = budget
        for share in (False, True):
            trainer.config.share_prefixes = share
            plan = trainer.prefix_plan(batch)
            assert (plan is not None) == share
            model.zero_grad()
            loss = trainer.compute_loss(model, batch)
            loss.backward()
            results[share] = (loss.item(), _grads(model))
    finally:
        trainer.config.micro_batch_tokens, trainer.loss_type, trainer.config.share_prefixes = saved
        model.zero_grad()
    assert results[True][0] == pytest.approx(results[False][0], rel=1e-5, abs=1e-6)
    torch.testing.assert_close(results[True][1], results[False][1], rtol=1e-4, atol=1e-6)
    assert results[True][1].abs().sum() > 0


def test_unshared_rows_keep_the_plain_update(trainer):
    model = trainer.model
    g = torch.Generator().manual_seed(4)
    prompts = [_tokens(g, n, model.config.vocab_size) for n in (30, 22, 41)]
    batch = trainer.rows_to_batch(prompts, [[5, 6], [7], [8, 9, 10]], [1.0, -1.0, 0.5])
    assert trainer.prefix_plan(batch) is None  # nothing shared: the plain path


def test_a_row_that_is_not_the_planned_row_is_refused(trainer):
    plan = plan_rows([[1] * 30 + [2], [1] * 30 + [3]], completion_width=1, budget=0)
    ids = torch.tensor([[1] * 30 + [4, 5], [1] * 30 + [3, 5]])
    with pytest.raises(RuntimeError, match="not the row the loss scores"):
        plan.row_logits(trainer.model, [0, 1], ids, torch.ones_like(ids), 1, contextlib.nullcontext)
