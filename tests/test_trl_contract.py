"""The contract between skillrise_train/trl_adapter.py and TRL: every private method, attribute and batch key the
adapter relies on, checked against the installed TRL, so that an upgrade fails here, loudly, and not as a
wrong loss. Also: gradient accumulation together with token-budget packing equals one pass over the batch."""

from __future__ import annotations

import inspect

import pytest
import torch

trl = pytest.importorskip("trl")

from test_train_loss import _rows, trainer  # noqa: E402,F401  (the module's tiny-model trainer fixture)
from trl import GRPOTrainer  # noqa: E402

from skillrise_train import trl_adapter  # noqa: E402
from skillrise_train.trl_adapter import BATCH_KEYS, TRL_VERSIONS, check_trl_version  # noqa: E402


def parameters(method) -> list[str]:
    return list(inspect.signature(method).parameters)


def test_the_installed_trl_is_the_tested_one():
    assert check_trl_version() == trl.__version__
    pins = open("pyproject.toml", encoding="utf-8").read()
    assert f'"trl{TRL_VERSIONS[0]},{TRL_VERSIONS[1]}"' in pins  # pyproject pins the adapter's range


def test_a_trl_outside_the_range_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(trl, "__version__", "1.10.0")
    with pytest.raises(RuntimeError, match=r"tested with trl >=1\.16,<1\.17.*trl 1\.10\.0 is installed"):
        check_trl_version()


def test_private_methods_have_the_signatures_the_adapter_calls():
    assert parameters(GRPOTrainer._generate_single_turn)[:5] == [
        "self", "prompt_ids", "images", "multimodal_fields", "num_generations"]
    assert parameters(GRPOTrainer._get_per_token_logps_and_entropies)[:8] == [
        "self", "model", "input_ids", "attention_mask", "logits_to_keep", "batch_size", "compute_entropy",
        "compute_aux_loss"]
    assert parameters(GRPOTrainer._compute_loss) == ["self", "model", "inputs"]
    assert parameters(GRPOTrainer._generate_and_score_completions) == ["self", "inputs"]
    # the adapter's override forwards multimodal keyword arguments by name: TRL's extra ones must have defaults
    extra = list(inspect.signature(GRPOTrainer._get_per_token_logps_and_entropies).parameters.values())[8:]
    assert all(p.default is None for p in extra)


def test_trl_utilities_the_adapter_imports_exist_and_behave():
    from trl.trainer.utils import pad, selective_log_softmax, selective_log_softmax_and_entropy

    logits = torch.randn(2, 3, 5)
    index = torch.randint(0, 5, (2, 3))
    expected = torch.log_softmax(logits, -1).gather(-1, index.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(selective_log_softmax(logits, index), expected)
    logps, entropy = selective_log_softmax_and_entropy(logits, index, temperature=1.0)
    torch.testing.assert_close(logps, expected)
    assert entropy.shape == (2, 3)
    assert pad([torch.tensor([1]), torch.tensor([2, 3])], padding_value=0, padding_side="left").tolist() == [[0, 1], [2, 3]]


def test_private_attributes_and_the_loss_contract(trainer):  # noqa: F811
    # TRL scales its own loss for gradient accumulation (so the Trainer must not, and the manual backward of
    # the packed micro-batches inherits the scaling)
    assert GRPOTrainer.loss_is_scaled_for_ga is True
    for name in ("_metrics", "chat_template_kwargs", "_tokenizer", "entropy_coef", "loss_type", "temperature"):
        assert hasattr(trainer, name), name
    assert isinstance(trainer.template_kwargs, dict) and trainer.pad_token_id == trainer._tokenizer.pad_token_id
    prompts, completions, advantages = _rows(trainer.model.config.vocab_size)
    batch = trainer.rows_to_batch(prompts, completions, advantages)
    assert set(BATCH_KEYS) <= set(batch)
    loss = trainer.policy_loss(trainer.model, batch)
    assert loss.dim() == 0 and torch.isfinite(loss)
    # generation through TRL's path: one list of token ids per prompt
    [ids] = trainer.generate_ids([prompts[0][:10]])
    assert isinstance(ids, list) and all(isinstance(t, int) for t in ids)


def test_only_the_adapter_touches_trl_private_names():
    import pathlib
    import re

    private = re.compile(r"\.(_generate_single_turn|_get_per_token_logps_and_entropies|_compute_loss|"
                         r"_generate_and_score_completions|_metrics|chat_template_kwargs|_tokenizer)\b")
    offenders = [str(path) for path in pathlib.Path("skillrise_train").glob("*.py")
                 if path.name != "trl_adapter.py" and private.search(path.read_text(encoding="utf-8"))]
    assert not offenders, f"TRL private API used outside trl_adapter.py: {offenders}"
    assert "from trl" not in "".join(p.read_text() for p in pathlib.Path("skillrise_train").glob("*.py")
                                     if p.name != "trl_adapter.py")
    assert trl_adapter.GRPOAdapter.__mro__[1] is GRPOTrainer


@pytest.mark.parametrize("loss_type", ["dapo", "grpo"])
@pytest.mark.parametrize("budget", [0, 70])
def test_gradient_accumulation_with_packing_equals_one_pass(trainer, loss_type, budget):  # noqa: F811
    """grad_accum=2: the two halves of a rollout's rows, each packed into token-budget micro-batches whose
    earlier members are backpropagated by hand, accumulate exactly the gradient of one pass over all rows."""
    model = trainer.model
    prompts, completions, advantages = _rows(model.config.vocab_size, seed=3)
    prompts, completions, advantages = prompts + prompts[:1], completions + completions[:1], advantages + [-1.0]
    saved = (trainer.config.micro_batch_tokens, trainer.loss_type, trainer.args.steps_per_generation,
             trainer.current_gradient_accumulation_steps)

    def gradient(accumulate: int, tokens: int) -> torch.Tensor:
        trainer.config.micro_batch_tokens = tokens
        trainer.args.steps_per_generation = trainer.current_gradient_accumulation_steps = accumulate
        batch = trainer.rows_to_batch(prompts, completions, advantages)
        rows = batch["prompt_ids"].size(0) // accumulate
        model.zero_grad()
        for part in range(accumulate):  # what TRL's split hands to each training_step
            piece = {k: (v[part * rows:(part + 1) * rows] if isinstance(v, torch.Tensor) and v.dim() > 0 else v)
                     for k, v in batch.items()}
            trainer.accelerator.backward(trainer.compute_loss(model, piece))  # loss_is_scaled_for_ga: no division
        return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]).clone()

    try:
        trainer.loss_type = loss_type
        one_pass = gradient(1, 0)
        accumulated = gradient(2, budget)
    finally:
        (trainer.config.micro_batch_tokens, trainer.loss_type, trainer.args.steps_per_generation,
         trainer.current_gradient_accumulation_steps) = saved
        model.zero_grad()
    # a scaling slip would be a factor of 2 on whole micro-batches; this is float summation order
    torch.testing.assert_close(accumulated, one_pass, rtol=1e-3, atol=1e-5)


# ------------------------------------------------------------------ TrainConfig -> GRPOConfig
def test_every_trl_facing_field_names_a_grpo_config_field_and_reaches_it():
    """Each TrainConfig field of TRL_FIELDS sets the GRPOConfig field it names (no hand mapping), with
    a type GRPOConfig accepts; the trainer's fixed fields and the mapped ones never overlap."""
    import dataclasses

    from trl import GRPOConfig

    from skillrise_train.config import TRL_FIELDS, TrainConfig
    from skillrise_train.grpo_args import make_grpo_config, trainer_fixed_trl_args

    grpo = {f.name for f in dataclasses.fields(GRPOConfig)}
    mapping = TRL_FIELDS
    assert {"lr", "epsilon", "dual_clip", "entropy_coef", "loss_type", "max_new_tokens", "grad_accum"} <= set(mapping)
    assert set(mapping.values()) <= grpo, set(mapping.values()) - grpo
    config = TrainConfig(env="toy", output_dir="unused", lr=3e-4, epsilon=0.3, dual_clip=2.5, entropy_coef=0.02,
                         loss_type="grpo", max_new_tokens=17, grad_accum=2, temperature=0.7, weight_decay=0.05)
    args = make_grpo_config(config)
    for ours, theirs in mapping.items():
        assert getattr(args, theirs) == getattr(config, ours), (ours, theirs)
    assert make_grpo_config(TrainConfig(env="toy", output_dir="unused", dual_clip=0)).delta is None  # 0 disables
    assert not set(mapping.values()) & set(trainer_fixed_trl_args(config, use_cpu=True))


def test_trl_options_set_other_grpo_config_fields_and_refuse_what_others_set():
    from skillrise_gym.backends.base import ConfigurationError
    from skillrise_train.cli import parse_config
    from skillrise_train.config import TrainConfig
    from skillrise_train.grpo_args import make_grpo_config

    config = parse_config(["--env", "toy", "--trl-options", '{"lr_scheduler_type": "cosine", "warmup_steps": 3, '
                           '"adam_beta2": 0.98}'])
    args = make_grpo_config(config)
    assert (args.lr_scheduler_type, args.warmup_steps, args.adam_beta2) == ("cosine", 3, 0.98)
    assert make_grpo_config(TrainConfig(env="toy")).lr_scheduler_type == "constant"  # the trainer's default
    for options, message in [
        ({"learning_rate": 1.0}, "set learning_rate with --lr"),
        ({"max_completion_length": 9}, "with --max-new-tokens"),
        ({"seed": 3}, "seed follows --seed"),
        ({"per_device_train_batch_size": 4}, "decided by the trainer"),
        ({"lr_schedular_type": "cosine"}, "did you mean lr_scheduler_type"),
        ({"lr_scheduler_type": "sideways"}, "GRPOConfig refused them"),
    ]:
        with pytest.raises(ConfigurationError, match=message):
            make_grpo_config(TrainConfig(env="toy", trl_options=options))
    with pytest.raises(ValueError, match="trl_options must be a JSON object"):
        parse_config(["--env", "toy", "--trl-options", "[1]"])
    assert TrainConfig.from_dict(TrainConfig(env="toy", trl_options={"warmup_steps": 2}).to_dict()).trl_options == {
        "warmup_steps": 2}
