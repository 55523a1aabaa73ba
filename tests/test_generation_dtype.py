"""`--generation-dtype`: a reduced-precision copy of the policy samples (bfloat16 decodes SmolLM2 1.4-1.8x
faster on this CPU), and the log-probs it drew the tokens with are the old policy's, so TRL's ratio is
policy / sampler: the mismatch is importance-weighted and clipped, not ignored."""

from __future__ import annotations

import pytest
import torch

trl = pytest.importorskip("trl")

from skillrise_train.cli import main  # noqa: E402
from skillrise_train.config import TrainConfig  # noqa: E402
from skillrise_train.trainer import SkillRiseTrainer  # noqa: E402


@pytest.fixture(scope="module")
def trainer(tmp_path_factory):
    out = tmp_path_factory.mktemp("gendtype")
    config = TrainConfig(env="toy", model="tiny", lora=True, K=2, G=2, S=1, output_dir=str(out), steps=1,
                         temperature=1.0, threads=1, max_new_tokens=12)
    trainer = SkillRiseTrainer.from_config(config)
    # a trained-looking adapter (peft starts lora_B at zero, which would make the merge a no-op)
    with torch.no_grad():
        g = torch.Generator().manual_seed(0)
        for name, p in trainer.model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.05)
    yield trainer
    trainer.rollout.close()


def _prompts(trainer):
    return [trainer.encode_prompt(text)[0] for text in ("find the red key", "open the door then take the gem",
                                                        "a longer task: go north, look around, pick up the apple")]


def _policy_logps(trainer, prompts, completions):
    batch = trainer.rows_to_batch(prompts, completions, [0.0] * len(prompts))
    with torch.no_grad():
        logps = trainer.old_log_probs(batch)
    return [logps[n, :len(c)].tolist() for n, c in enumerate(completions)]


def test_a_float32_copy_draws_the_policys_tokens_and_records_the_policys_log_probs(trainer):
    """The recorder's alignment (each token's log-prob read at the next step, the last one at the end) is
    proven where the copy is exact: same tokens as the policy itself, log-probs equal to the update's."""
    prompts, seeds = _prompts(trainer), [11, 12, 13]
    trainer.generation_dtype = None
    plain = trainer.generate_ids(prompts, seeds)
    assert trainer.generate_ids(prompts, seeds, with_logps=True) == (plain, None)  # the policy sampled
    trainer.generation_dtype = torch.float32
    try:
        ids, logps = trainer.generate_ids(prompts, seeds, with_logps=True)
    finally:
        trainer.generation_dtype = None
    assert ids == plain and [len(r) for r in logps] == [len(r) for r in ids] and all(len(r) > 1 for r in ids)
    for recorded, policy in zip(logps, _policy_logps(trainer, prompts, ids)):
        torch.testing.assert_close(torch.tensor(recorded), torch.tensor(policy), atol=1e-4, rtol=0)


def test_a_bfloat16_copy_samples_close_to_the_policy_and_leaves_its_weights_alone(trainer):
    prompts, seeds = _prompts(trainer), [21, 22, 23]
    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    trainer.generation_dtype = torch.bfloat16
    try:
        with trainer.generation_weights():
            ids, logps = trainer.generate_ids(prompts, seeds, with_logps=True)
            sampler = trainer._sampler
            assert next(sampler.parameters()).dtype == torch.bfloat16
            with torch.no_grad():  # it computes in bfloat16 (a copy of a prepared model's forward would not)
                assert sampler(input_ids=torch.tensor([prompts[0]])).logits.dtype == torch.bfloat16
            assert trainer.generate_ids(prompts, seeds, with_logps=True)[0] == ids  # one copy per block
            assert trainer._sampler is sampler
        assert trainer._sampler is None  # freed with the block
    finally:
        trainer.generation_dtype = None
    after = trainer.model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before) and all(v.dtype == torch.float32 for v in after.values())
    gaps = torch.cat([torch.tensor(r) - torch.tensor(p) for r, p in zip(logps, _policy_logps(trainer, prompts, ids))])
    assert 0 < float(gaps.abs().max()) < 0.5  # bfloat16 differs from float32, a little
    assert float(gaps.abs().mean()) < 0.05


def test_rollout_rows_carry_the_samplers_log_probs_as_the_old_policys(trainer):
    trainer.generation_dtype = torch.bfloat16
    try:
        batch = trainer.rollout_batch()
    finally:
        trainer.generation_dtype = None
    old, mask = batch["old_per_token_logps"], batch["completion_mask"].bool()
    assert old.shape == batch["completion_ids"].shape
    assert bool((old[mask] < 0).all()) and bool((old[~mask] == 0).all())
    policy = trainer.old_log_probs(batch)
    assert 0 < float((policy - old)[mask].abs().mean()) < 0.05  # the sampler's, not the policy's


def test_the_flag_trains_and_bad_values_are_refused(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["--env", "toy", "--model", "tiny", "--max-new-tokens", "8", "--threads", "1", "--K", "2", "--G", "2",
                 "--S", "1", "--steps", "1", "--max-task-steps", "1", "--temperature", "1.0",
                 "--generation-dtype", "bfloat16", "--output-dir", str(out)]) == 0
    assert (out / "final").is_dir()
    capsys.readouterr()
    assert main(["--generation-dtype", "int8", "--output-dir", str(tmp_path / "bad")]) == 2
    assert "generation_dtype must be one of" in capsys.readouterr().err
    with pytest.raises(ValueError, match="vLLM generates in the dtype"):
        TrainConfig(generation_dtype="bfloat16", use_vllm=True)


def test_bf16_autocasts_the_update_on_a_cpu_too(tmp_path):
    """--bf16 was silently dropped on a CPU; it is honoured (accelerate's CPU autocast), as on a GPU."""
    config = TrainConfig(env="toy", model="tiny", lora=False, K=2, G=2, S=1, output_dir=str(tmp_path / "run"),
                         steps=1, bf16=True, threads=1)
    trainer = SkillRiseTrainer.from_config(config)
    try:
        assert trainer.args.bf16 and trainer.accelerator.mixed_precision == "bf16"
        with trainer.accelerator.autocast():
            assert torch.nn.Linear(4, 4)(torch.ones(1, 4)).dtype == torch.bfloat16
        assert next(trainer.model.parameters()).dtype == torch.float32  # the weights stay float32
    finally:
        trainer.rollout.close()
