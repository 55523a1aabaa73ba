"""The update's attention on a CPU: masked SDPA that skips the keys a block of queries cannot see.

The update's forward passes carry an explicit attention mask (left padding in a micro-batch of rows; a row's
own tokens on its shared prefix's keys and values, shared_prefix.py), and with a mask SDPA's CPU flash kernel
computes every query block against every key block: it skips the hidden triangle only under `is_causal`,
which needs no mask. transformers also copies grouped key/value heads out to every query head
(`repeat_kv`) when there is a mask, because on CUDA masked grouped attention falls back to the math kernel.
`masked_sdpa` (the attention implementation "skillrise_sdpa", used by `update_attention`):

- splits the queries into blocks of `QUERY_BLOCK` and gives each block only the key columns at least one of
  its rows may see (read from the mask once per forward pass, not per layer). A column none of the block's
  rows may see adds exp(-inf) = 0 to every row's softmax, so each row attends the same keys with the same
  weights: the output and gradients are SDPA's up to floating-point summation order;
- passes `enable_gqa`, so the kernel reads each key/value head for its group of query heads (no copy).

Only on a CPU, for boolean 4-D masks; everything else (no mask, other devices, position biases) goes to
transformers' own SDPA function. tests/test_update_attention.py checks the outputs, gradients and update
against transformers' SDPA; docs/train.md ("Shared prefixes in the update", masked attention) has the profile
this answers and the measured gain.
"""

from __future__ import annotations

import weakref
from contextlib import contextmanager
from typing import Any, Iterator

import torch

__all__ = ["NAME", "QUERY_BLOCK", "masked_sdpa", "update_attention"]

NAME = "skillrise_sdpa"
#: queries per block: fewer blocks cost a kernel call each, larger ones skip less of the hidden triangle
QUERY_BLOCK = 512

# the last mask's blocks: (weak reference to the mask, block size, [(q0, q1, k0, k1), ...]); a forward pass
# builds one mask and every layer reads it, so the blocks are computed once per pass
_last_blocks: tuple[Any, int, list[tuple[int, int, int, int]]] | None = None


def query_blocks(mask: torch.Tensor, block: int = QUERY_BLOCK) -> list[tuple[int, int, int, int]]:
    """(first query, end query, first key, end key) of each block of `block` queries of a boolean mask
    [batch, heads or 1, queries, keys]: the keys outside [first key, end key) are hidden from every row of
    the block in every batch row and head. A block whose rows see nothing keeps every key."""
    global _last_blocks
    queries = mask.shape[2]
    if _last_blocks is not None and _last_blocks[0]() is mask and _last_blocks[1] == block:
        return _last_blocks[2]
    blocks = []
    for start in range(0, queries, block):
        end = min(start + block, queries)
        seen = mask[:, :, start:end, :].any(dim=2).any(dim=1).any(dim=0).nonzero()
        blocks.append((start, end, int(seen[0]), int(seen[-1]) + 1) if len(seen) else
                      (start, end, 0, mask.shape[3]))
    _last_blocks = (weakref.ref(mask), block, blocks)
    return blocks


def masked_sdpa(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                **kwargs: Any) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature: query [b, h, q, d], key/value [b, h_kv, k, d], returns
    ([b, q, h, d], None)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if (query.device.type != "cpu" or attention_mask is None or attention_mask.dtype != torch.bool
            or attention_mask.dim() != 4 or kwargs.get("position_bias") is not None
            or kwargs.get("softcap") is not None or query.shape[2] <= 1):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                      scaling=scaling, **kwargs)
    grouped = query.shape[1] != key.shape[1]
    outputs = [
        torch.nn.functional.scaled_dot_product_attention(
            query[:, :, q0:q1], key[:, :, k0:k1], value[:, :, k0:k1], attn_mask=attention_mask[:, :, q0:q1, k0:k1],
            dropout_p=dropout, scale=scaling, enable_gqa=grouped)
        for q0, q1, k0, k1 in query_blocks(attention_mask)
    ]
    output = outputs[0] if len(outputs) == 1 else torch.cat(outputs, dim=2)
    return output.transpose(1, 2).contiguous(), None


def _register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(NAME, masked_sdpa)
    AttentionMaskInterface.register(NAME, sdpa_mask)  # the same boolean masks as "sdpa"


@contextmanager
def update_attention(model: Any) -> Iterator[None]:
    """Inside the block, a CPU model that uses transformers' "sdpa" attention uses `masked_sdpa` instead
    (its config's attention implementation is switched and restored; generation is not touched). Not under
    gradient checkpointing: its backward pass recomputes the forward after the block, with "sdpa"."""
    config = getattr(model, "config", None)
    if (config is None or getattr(config, "_attn_implementation", None) != "sdpa"
            or next(model.parameters()).device.type != "cpu"
            or any(getattr(m, "gradient_checkpointing", False) is True for m in model.modules())):
        yield
        return
    _register()
    config._attn_implementation = NAME
    try:
        yield
    finally:
        config._attn_implementation = "sdpa"
