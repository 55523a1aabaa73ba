"""Reuse of a prompt's key/value cache by the next prompt that starts with the same tokens.

An agent's turns within one task share most of their prompt: the role, the skill document, the task, and
(in the compact prompts) much of the page and the history. HF `generate` prefills every prompt from its
first token, and on a CPU that prefill is most of a generation call (docs/train.md, "CPU generation and
update", has the profile). `PrefixCache` keeps, for one set of weights, the keys and values of recent
prompts, and `prefilled` builds a batch's cache from them: each prompt reuses the longest token prefix it
shares with a stored prompt and the model runs only on the rest, one row at a time (so no row pays for
another's padding). `generate` is then given that cache and the full, left-padded prompts; it runs the
last prompt token and decodes as usual.

The cache is content-addressed (token ids), so it knows nothing of trials or sequences. Its entries are
valid only for the weights that computed them: make one per block of calls with fixed weights, and drop it
when the weights change. Only models whose every layer is plain full attention (a `DynamicCache` of
`DynamicLayer`s) are supported (`supports`); others are generated as before.

Results match an unshared prefill up to floating-point summation order (the prefix's keys and values are
computed in another pass); tests/test_prefix_cache.py checks that greedy tokens are identical in float32.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import torch

__all__ = ["PrefixCache", "PrefillStats", "prefilled", "supports"]


def supports(model: Any) -> bool:
    """Whether `model`'s cache is plain full attention in every layer (what `prefilled` can splice)."""
    config = getattr(model, "config", None)
    if config is None or getattr(config, "is_encoder_decoder", False):
        return False
    text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    layer_types = getattr(text, "layer_types", None)
    if layer_types is not None and any(t != "full_attention" for t in layer_types):
        return False
    if getattr(text, "sliding_window", None) and getattr(text, "use_sliding_window", True):
        return False
    return True


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


@dataclass
class _Entry:
    ids: tuple[int, ...]
    layers: list[tuple[torch.Tensor, torch.Tensor]]  # per layer (keys, values), each [1, heads, len(ids), dim]
    nbytes: int


@dataclass
class PrefillStats:
    """Prompt tokens of the calls so far: all of them, those whose keys/values came from the cache, and
    those the model ran (the rest, less each prompt's last token, which `generate` runs)."""

    prompt_tokens: int = 0
    reused_tokens: int = 0
    computed_tokens: int = 0

    @property
    def reused_share(self) -> float:
        return self.reused_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


@dataclass
class PrefixCache:
    """Keys and values of recent prompts, at most `max_bytes` of them (least recently used go first).

    A prompt that extends a stored one replaces it (a task's next turn supersedes its last)."""

    max_bytes: int = 1 << 30
    entries: list[_Entry] = field(default_factory=list)
    stats: PrefillStats = field(default_factory=PrefillStats)

    @property
    def nbytes(self) -> int:
        return sum(e.nbytes for e in self.entries)

    def longest(self, ids: Sequence[int]) -> tuple[int, _Entry | None]:
        """The stored entry sharing the longest token prefix with `ids`, and that prefix's length."""
        best, best_len = None, 0
        for entry in self.entries:
            n = _common_prefix(entry.ids, ids)
            if n > best_len:
                best, best_len = entry, n
        return best_len, best

    def add(self, ids: Sequence[int], layers: list[tuple[torch.Tensor, torch.Tensor]],
            replaces: _Entry | None = None) -> None:
        if replaces is not None and replaces in self.entries and len(replaces.ids) <= len(ids):
            self.entries.remove(replaces)
        nbytes = sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in layers)
        if nbytes > self.max_bytes:
            return
        self.entries.append(_Entry(tuple(ids), layers, nbytes))
        total = self.nbytes
        while total > self.max_bytes:  # least recently used first (entries are kept in use order)
            total -= self.entries.pop(0).nbytes

    def touch(self, entry: _Entry) -> None:
        if entry in self.entries:
            self.entries.remove(entry)
            self.entries.append(entry)

    def clear(self) -> None:
        self.entries.clear()


def _cache_layers(cache: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(layer.keys, layer.values) for layer in cache.layers]


@torch.no_grad()
def prefilled(model: Any, prompts: Sequence[Sequence[int]], store: PrefixCache) -> Any:
    """A `DynamicCache` holding every prompt but its last token, left-padded like the prompts (pass it to
    `generate` with the left-padded prompts and their attention mask). Each prompt's keys and values reuse
    the longest prefix stored in `store` and are stored back for later prompts."""
    from transformers import DynamicCache

    if not prompts or min(len(p) for p in prompts) < 1:
        raise ValueError("prefilled needs non-empty prompts")
    device = next(model.parameters()).device
    rows: list[list[tuple[torch.Tensor, torch.Tensor]] | None] = []
    for prompt in prompts:
        ids = list(prompt)
        target = len(ids) - 1  # generate runs the last token itself
        store.stats.prompt_tokens += len(ids)
        if target == 0:
            rows.append(None)
            continue
        matched, entry = store.longest(ids[:target])
        matched = min(matched, target)
        if entry is not None:
            store.touch(entry)
        if entry is not None and matched == target:  # the whole prefix is stored: nothing to run or to store
            layers = [(k[:, :, :matched], v[:, :, :matched]) for k, v in entry.layers]
        else:
            cache = DynamicCache()
            if entry is not None and matched > 0:
                cache = DynamicCache(ddp_cache_data=[(k[:, :, :matched], v[:, :, :matched]) for k, v in entry.layers])
            new = torch.tensor([ids[matched:target]], dtype=torch.long, device=device)
            positions = torch.arange(matched, target, device=device).unsqueeze(0)
            model(input_ids=new, position_ids=positions, cache=cache, use_cache=True, logits_to_keep=1)
            layers = _cache_layers(cache)
            if cache.get_seq_length() != target:
                raise RuntimeError(f"the model filled {cache.get_seq_length()} of {target} cache positions (is "
                                   "gradient checkpointing on in training mode? it turns the cache off)")
            extends = entry is not None and matched == len(entry.ids)  # this prompt continues a stored one
            store.add(ids[:target], layers, replaces=entry if extends else None)
        store.stats.reused_tokens += matched
        store.stats.computed_tokens += target - matched
        rows.append(layers)

    width = max(len(p) for p in prompts) - 1
    template = next((r for r in rows if r is not None), None)
    if template is None:  # every prompt is one token: nothing cached
        return DynamicCache()
    batched = []
    for layer_index, (k0, v0) in enumerate(template):
        keys, values = [], []
        for prompt, row in zip(prompts, rows):
            length = len(prompt) - 1
            pad = width - length
            if row is None:
                k = k0.new_zeros((1, k0.size(1), width, k0.size(3)))
                v = v0.new_zeros((1, v0.size(1), width, v0.size(3)))
            else:
                k, v = row[layer_index]
                if pad:
                    k = torch.cat([k.new_zeros((1, k.size(1), pad, k.size(3))), k], dim=2)
                    v = torch.cat([v.new_zeros((1, v.size(1), pad, v.size(3))), v], dim=2)
            keys.append(k)
            values.append(v)
        batched.append((torch.cat(keys, dim=0), torch.cat(values, dim=0)))
    return DynamicCache(ddp_cache_data=batched)
