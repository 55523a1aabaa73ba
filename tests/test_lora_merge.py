"""LoRA merged for generation (skillrise_train/lora.py): inside `merged_lora` the model computes what the
unmerged adapter computes; afterwards the base weights are the very same storage, bit for bit, and the
adapter runs unmerged again; layers it cannot merge exactly leave the model untouched; the trainer's seeded
generation gives the same tokens merged and unmerged."""

from __future__ import annotations

import os

import pytest
import torch

pytest.importorskip("peft")
pytest.importorskip("trl")

from peft import LoraConfig, get_peft_model  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

from skillrise_gym.models import build_tiny_model  # noqa: E402
from skillrise_train.config import TrainConfig  # noqa: E402
from skillrise_train.lora import mergeable_layers, merged_lora  # noqa: E402


def _peft(tiny_dir: str, **lora) -> torch.nn.Module:
    model = AutoModelForCausalLM.from_pretrained(tiny_dir, dtype=torch.float32, local_files_only=True)
    peft_model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules="all-linear",
                                                  task_type="CAUSAL_LM", **lora))
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if "lora_B" in name:  # zero at initialisation: the adapter would change nothing
                param.copy_(torch.randn(param.shape, generator=generator) * 0.05)
    return peft_model.eval()


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> str:
    return build_tiny_model(tmp_path_factory.mktemp("lora_merge") / "tiny")


def test_merged_matches_unmerged_and_restores_the_base_bit_for_bit(tiny_dir):
    model = _peft(tiny_dir)
    ids = torch.randint(3, 200, (2, 17), generator=torch.Generator().manual_seed(1))
    bases = {name: p for name, p in model.named_parameters() if "base_layer.weight" in name}
    before = {name: (p.data, p.data.clone()) for name, p in bases.items()}
    with torch.no_grad():
        unmerged = model(input_ids=ids).logits
        with merged_lora(model) as count:
            merged_flags = [m.merged for m in model.modules() if hasattr(m, "merged_adapters")]
            merged = model(input_ids=ids).logits
            changed = sum(not torch.equal(p.data, before[name][1]) for name, p in bases.items())
        after = model(input_ids=ids).logits
    assert merged_flags and all(merged_flags)
    assert count == len(bases) and changed == len(bases)  # every adapted weight was merged inside
    torch.testing.assert_close(merged, unmerged, atol=1e-5, rtol=1e-5)
    assert torch.equal(after, unmerged)  # unmerged again, on the original weights
    for name, p in bases.items():
        original, copy = before[name]
        assert p.data.data_ptr() == original.data_ptr() and torch.equal(p.data, copy), name
    assert not any(layer.merged for layer in mergeable_layers(model))
    assert all(p.requires_grad for n, p in model.named_parameters() if "lora_" in n)


def test_a_failed_merge_restores_what_was_merged(tiny_dir, monkeypatch):
    model = _peft(tiny_dir)
    layers = mergeable_layers(model)
    originals = [layer.get_base_layer().weight.data_ptr() for layer in layers]
    calls = {"n": 0}
    real = type(layers[0]).merge

    def failing(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:
            raise ValueError("NaNs detected in the merged weights")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(type(layers[0]), "merge", failing)
    with pytest.raises(ValueError, match="NaNs"):
        with merged_lora(model):
            pass
    assert [layer.get_base_layer().weight.data_ptr() for layer in layers] == originals
    assert not any(layer.merged for layer in layers)


def test_what_cannot_be_merged_exactly_is_left_alone(tiny_dir):
    dora = _peft(tiny_dir, use_dora=True)
    assert mergeable_layers(dora) == []
    with merged_lora(dora) as count:
        assert count == 0
    plain = _peft(tiny_dir)
    with merged_lora(plain, enabled=False) as count:
        assert count == 0 and not any(layer.merged for layer in mergeable_layers(plain))
    plain.merge_adapter()  # already merged by someone else: not touched
    assert mergeable_layers(plain) == []


def test_seeded_generation_is_the_same_merged_and_unmerged(tmp_path):
    from skillrise_train.trainer import SkillRiseTrainer

    os.environ.setdefault("SKILLRISE_CACHE", str(tmp_path / "cache"))
    config = TrainConfig(env="toy", model="tiny", lora=True, K=2, G=2, S=1, output_dir=str(tmp_path / "run"),
                         steps=1, temperature=1.0, max_new_tokens=12)
    trainer = SkillRiseTrainer.from_config(config)
    try:
        generator = torch.Generator().manual_seed(0)
        with torch.no_grad():  # a LoRA that matters (B starts at zero)
            for name, param in trainer.model.named_parameters():
                if "lora_B" in name:
                    param.copy_(torch.randn(param.shape, generator=generator) * 0.05)
        prompts = ["press the red switch", "open the blue door and then the green one", "wait"]
        prefixes, seeds = ["<action>"] * 3, [5, 6, 7]
        weights = {n: p.data.clone() for n, p in trainer.model.named_parameters()}
        trainer.merge_lora_for_generation = True
        merged = trainer.generate_completions(prompts, prefixes, seeds)
        trainer.merge_lora_for_generation = False
        unmerged = trainer.generate_completions(prompts, prefixes, seeds)
        assert [c.completion_ids for c in merged] == [c.completion_ids for c in unmerged]
        assert all(torch.equal(p.data, weights[n]) for n, p in trainer.model.named_parameters())
    finally:
        trainer.rollout.close()
