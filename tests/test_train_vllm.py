"""What the trainer asks of vLLM (colocate mode), tested with a stand-in for vLLM's engine class: vLLM needs a
GPU and cannot be installed here. The stand-in replaces `vllm.LLM` and `vllm.SamplingParams` where TRL looks
them up (trl/generation/vllm_generation.py); everything above them is TRL's code and ours, unchanged: TRL
builds the engine, syncs the weights into it every step and calls its `generate`.
"""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from skillrise_train.config import TrainConfig


class StandInSamplingParams:
    """vLLM's SamplingParams, as far as TRL and the trainer use it: keyword fields, `clone()`, `seed`."""

    def __init__(self, **fields):
        self.seed = None
        self.__dict__.update(fields)

    def clone(self):
        return StandInSamplingParams(**dict(self.__dict__))


class StandInLLM:
    """vLLM's LLM: records how it was built and what each generate call asked; a request's tokens follow its
    seed only (as vLLM's per-request seeded sampler), ending with EOS."""

    built: list[dict] = []

    def __init__(self, **kwargs):
        StandInLLM.built.append(kwargs)
        self.calls: list[list] = []
        self.loaded: list[str] = []
        runner = SimpleNamespace(model=SimpleNamespace(load_weights=lambda pairs: self.loaded.extend(n for n, _ in pairs)))
        self.llm_engine = SimpleNamespace(model_executor=SimpleNamespace(driver_worker=SimpleNamespace(model_runner=runner)),
                                          model_config=SimpleNamespace(max_model_len=kwargs.get("max_model_len") or 2048))
        self.eos = None

    def reset_prefix_cache(self):
        pass

    def generate(self, prompts, sampling_params=None, use_tqdm=False):
        params = sampling_params if isinstance(sampling_params, list) else [sampling_params] * len(prompts)
        self.calls.append(params)
        outputs = []
        for prompt, p in zip(prompts, params):
            rng = random.Random(p.seed)
            tokens = [rng.randrange(5, 200) for _ in range(3)] + [self.eos]
            logprobs = [{t: SimpleNamespace(logprob=-1.0, rank=1)} for t in tokens]
            outputs.append(SimpleNamespace(prompt_token_ids=prompt["prompt_token_ids"],
                                           outputs=[SimpleNamespace(token_ids=tokens, logprobs=logprobs)]))
        return outputs


@pytest.fixture
def stand_in_vllm(monkeypatch):
    import trl.generation.vllm_generation as vg

    import skillrise_train.grpo_args as grpo_args

    StandInLLM.built = []
    monkeypatch.setattr(vg, "is_vllm_available", lambda *a, **k: True)
    monkeypatch.setattr(vg, "LLM", StandInLLM, raising=False)
    monkeypatch.setattr(vg, "SamplingParams", StandInSamplingParams, raising=False)
    monkeypatch.setattr(grpo_args, "check_vllm_installed", lambda: None)
    return StandInLLM


def _trainer(tmp_path, **overrides):
    from skillrise_train.trainer import SkillRiseTrainer

    settings = dict(env="toy", model="tiny", lora=False, K=2, G=2, S=4, max_task_steps=3, max_new_tokens=8, steps=1,
                    output_dir=str(tmp_path / "run"), seed=1, threads=1, use_vllm=True)
    trainer = SkillRiseTrainer.from_config(TrainConfig(**{**settings, **overrides}))
    trainer.vllm_generation.llm.eos = trainer.eos_token_ids[0]
    return trainer


def test_the_engine_admits_a_whole_generation_call_and_each_request_gets_its_seed(tmp_path, stand_in_vllm):
    trainer = _trainer(tmp_path)
    try:
        built = stand_in_vllm.built[-1]
        # S x G = 8 trials generate together; TRL alone would build it for 2 (per_device_train_batch_size x
        # steps_per_generation)
        assert built["max_num_seqs"] == 8
        engine = trainer.vllm_generation.llm
        prompts = ["Your task is to: press the red switch.", "Curate the skill document.", "Look around."]
        together = trainer.generate_completions(prompts, ["", "", ""], [11, 12, 13])
        assert [p.seed for p in engine.calls[-1]] == [11, 12, 13]
        apart = trainer.generate_completions(prompts[2:], [""], [13])
        assert apart[0].completion_ids == together[2].completion_ids  # its seed, not its batch-mates
        assert "generate" not in vars(engine)  # the per-request wrapper is gone after the call
        # a whole training step through TRL's path: weights synced into the engine, rows trained
        trainer.train()
        assert engine.loaded and trainer.state.global_step == 1
        seeds = [p.seed for call in engine.calls[2:] for p in call]
        assert len(seeds) == len(set(seeds)) > 0  # every turn of the rollout its own seed
    finally:
        trainer.rollout.close()


def test_the_prompt_budget_stays_within_the_engine_length(tmp_path, stand_in_vllm):
    from skillrise_gym.backends import ConfigurationError

    trainer = _trainer(tmp_path, trl_options={"vllm_max_model_length": 256})
    try:
        assert stand_in_vllm.built[-1]["max_model_len"] == 256
        assert trainer.max_prompt_tokens == 256 - 8
    finally:
        trainer.rollout.close()
    with pytest.raises(ConfigurationError, match="leaves no room for prompts"):
        _trainer(tmp_path, trl_options={"vllm_max_model_length": 20})
    with pytest.raises(ConfigurationError, match="exceeds vLLM's engine length"):
        _trainer(tmp_path, trl_options={"vllm_max_model_length": 256}, max_prompt_tokens=300)


def test_vllm_settings_the_trainer_cannot_run_are_one_line_errors_before_the_model_loads(tmp_path, capsys, monkeypatch):
    import skillrise_gym.models as models
    from skillrise_train.cli import main

    def no_model(*args, **kwargs):
        raise AssertionError("the model was loaded before the settings were checked")

    monkeypatch.setattr(models, "load_model_and_tokenizer", no_model)
    out = ["--env", "toy", "--model", "tiny", "--output-dir", str(tmp_path / "x")]
    # vllm is not installed here: the extra is named, exit 2, no traceback
    assert main([*out, "--use-vllm"]) == 2
    error = capsys.readouterr().err.strip()
    assert "pip install 'skillrise-gym[vllm]'" in error and "Traceback" not in error and len(error.splitlines()) == 1
    monkeypatch.setattr("skillrise_train.grpo_args.check_vllm_installed", lambda: None)
    assert main([*out, "--use-vllm", "--trl-options", '{"vllm_tensor_parallel_size": 2}']) == 2
    assert "vllm_tensor_parallel_size" in capsys.readouterr().err
    assert main([*out, "--use-vllm", "--trl-options", '{"vllm_mode": "server"}']) == 2
    assert "vllm_mode" in capsys.readouterr().err
