"""LoRA adapters merged into their base weights while the policy generates, restored exactly afterwards.

An unmerged LoRA layer runs the base matmul plus the adapter's two small ones (and a dropout and a scaled
add) on every decoded token: on a GPU, where decoding a 135M model is bound by kernel launches, that is
most of the time per token (docs/train.md, "On a GPU", has the measured gain; on a CPU it is within noise). The weights
do not change while a rollout generates, so the adapter can be folded into them for the rollout.

`merged_lora(model)` uses peft's own merge with ``safe_merge=True``, which writes the merged weight into a
new tensor (peft's in-place merge would overwrite the base), keeps a reference to each original tensor, and
on exit puts the originals back: the base weights afterwards are the same tensors, bit for bit, as before
(peft's `unmerge` subtracts the delta again, which leaves rounding error in the base each call: TRL accepts
that for vLLM's weight sync; a trainer that merges every generation call should not). The cost is one
transient copy of the adapted weights, freed on exit.

Only plain LoRA on `nn.Linear`-like layers is merged (no DoRA or other variants, no LoRA bias, no
`Conv`/`Embedding` adapters); anything else leaves the model as it is. The trainer does not call it for
sharded models (FSDP, ZeRO-3), whose full weights exist only inside their gather.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

import torch


def mergeable_layers(model: Any) -> list[Any]:
    """The LoRA layers of `model` that `merged_lora` folds: all of them, or none when one cannot be merged
    exactly as described in the module docstring (the model then runs unmerged)."""
    try:
        from peft.tuners.lora import LoraLayer
    except ImportError:  # no peft: no adapters
        return []
    layers = [m for m in model.modules() if isinstance(m, LoraLayer)]
    for layer in layers:
        if layer.merged or getattr(layer, "disable_adapters", False):
            return []
        if getattr(layer, "lora_variant", None) or any(getattr(layer, "lora_bias", {}).values()):
            return []
        if not isinstance(layer.get_base_layer(), torch.nn.Linear):
            return []
    return layers


@contextmanager
def merged_lora(model: Any, enabled: bool = True) -> Iterator[int]:
    """Inside the block, `model`'s active LoRA adapters are merged into its base weights; on exit the base
    weights are the original tensors again. Yields how many layers were merged (0: nothing to do)."""
    layers = mergeable_layers(model) if enabled else []
    originals: list[tuple[Any, torch.Tensor]] = []
    try:
        with torch.no_grad():
            for layer in layers:
                base = layer.get_base_layer()
                originals.append((layer, base.weight.data))
                layer.merge(safe_merge=True)  # a new tensor holds the merged weight; the original is kept
        yield len(layers)
    finally:
        for layer, original in originals:
            layer.get_base_layer().weight.data = original
            layer.merged_adapters = []
