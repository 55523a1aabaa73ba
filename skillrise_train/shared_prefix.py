"""The update's shared prompt prefixes: each distinct prompt token run once per step, gradients exact.

A trial's turns repeat each other's prompts (the role, the skill document, the task, much of the page), and
the G trials of a group start from the same prompt, so a step's rows share long token prefixes: in the main
job's rows the distinct tokens are 0.48-0.62 of all tokens (docs/train.md, "Shared prefixes in the update").
The plain update runs every row from its first token. `PrefixPlan` runs each shared prefix once:

- `plan_rows` builds the prefix tree of the rows' prompts: a node is a run of tokens that two or more rows
  share (at least `min_tokens` of them), under its parent node. A row's own tokens (the rest of its
  prompt, at least its last prompt token, and its completion) are run on top of its deepest node.
- rows are ordered depth-first, and a micro-batch is consecutive rows under the same deepest node (within
  the token budget, counting their own tokens only).
- a node is run once, on its parent's keys and values; its keys and values are then detached into leaves
  that require grad, so micro-batches build on the leaves and hold no graph of the node. Their backward
  passes accumulate the leaves' gradients. After the last row under a node, `release` backpropagates the
  node's own graph with those gradients (which reach its parent's leaves) and frees it.

The loss and every gradient are those of the plain update up to floating-point summation order (rows'
logits come from the same tokens at the same relative positions; tests/test_shared_prefix.py compares
losses and gradients). Memory: the graphs held at once are the nodes on one root-to-row path (fewer tokens
than the longest prompt) plus one micro-batch, so the token budget still bounds it (at most about twice).

Knows nothing of trials or sequences: it sees token rows. Not used with several processes (DDP all-reduces
on each backward; a node's backward comes after its rows'), sharded models, gradient checkpointing (it
turns the model's cache off) or models whose cache is not plain full attention (`prefix_cache.supports`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import torch

__all__ = ["MIN_NODE_TOKENS", "Node", "PrefixPlan", "plan_rows"]

#: the fewest tokens a shared run must have to become a node (its own forward pass): shorter runs cost more
#: in a pass's fixed overhead than they save
MIN_NODE_TOKENS = 16


@dataclass(eq=False)
class Node:
    """A run of prompt tokens [start, end) shared by two or more rows, under `parent`."""

    start: int
    end: int
    tokens: list[int]
    parent: "Node | None"
    rows: int = 0  # rows under this node (itself or a descendant) not yet released
    outputs: list[tuple[torch.Tensor, torch.Tensor]] | None = None  # per layer keys, values [1, h, end, d] (graph)
    leaves: list[tuple[torch.Tensor, torch.Tensor]] | None = None  # the same, detached, requiring grad

    def path(self) -> list["Node"]:
        node, out = self, []
        while node is not None:
            out.append(node)
            node = node.parent
        return out[::-1]


@dataclass
class PrefixPlan:
    """Rows (prompt tokens, completion tokens) with their deepest shared node and micro-batches."""

    prompts: list[list[int]]
    node_of: list[Node | None]  # each row's deepest node (None: no shared prefix)
    groups: list[list[int]] = field(default_factory=list)  # micro-batches (row indices, depth-first)
    completion_width: int = 0

    @property
    def nodes(self) -> list[Node]:
        seen: dict[int, Node] = {}
        for node in self.node_of:
            for n in node.path() if node is not None else []:
                seen.setdefault(id(n), n)
        return list(seen.values())

    def tokens(self) -> tuple[int, int]:
        """(tokens the plain update runs, tokens this plan runs): rows x (prompt + completion width) against
        each node once plus each row's own tokens."""
        plain = sum(len(p) + self.completion_width for p in self.prompts)
        own = sum(len(p) - (node.end if node else 0) + self.completion_width
                  for p, node in zip(self.prompts, self.node_of))
        return plain, own + sum(n.end - n.start for n in self.nodes)

    # ------------------------------------------------------------------ running
    def leaves_for(self, model: Any, node: Node, autocast: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """The keys and values of `node`'s whole prefix (leaves requiring grad), running the nodes on its path
        that have not run yet."""
        from transformers import DynamicCache

        device = next(model.parameters()).device
        for n in node.path():
            if n.leaves is not None:
                continue
            past = n.parent.leaves if n.parent is not None else None
            cache = DynamicCache(ddp_cache_data=list(past)) if past else DynamicCache()
            ids = torch.tensor([n.tokens], dtype=torch.long, device=device)
            positions = torch.arange(n.start, n.end, device=device).unsqueeze(0)
            with autocast():
                model(input_ids=ids, position_ids=positions, cache=cache, use_cache=True, logits_to_keep=1)
            if cache.get_seq_length() != n.end:
                raise RuntimeError(f"the model filled {cache.get_seq_length()} of {n.end} cache positions")
            n.outputs = [(layer.keys, layer.values) for layer in cache.layers]
            n.leaves = [(k.detach().requires_grad_(k.requires_grad), v.detach().requires_grad_(v.requires_grad))
                        for k, v in n.outputs]
        return node.leaves  # type: ignore[return-value]

    def row_logits(self, model: Any, rows: Sequence[int], input_ids: torch.Tensor, attention_mask: torch.Tensor,
                   logits_to_keep: int, autocast: Any) -> torch.Tensor:
        """Logits of the last `logits_to_keep + 1` positions of a micro-batch's rows (`rows`, one group;
        `input_ids`: their left-padded prompts then their completion columns, as TRL's loss builds them),
        running each row's own tokens on its shared prefix's keys and values."""
        from transformers import DynamicCache

        node = self.node_of[rows[0]]
        if any(self.node_of[r] is not node for r in rows):
            raise RuntimeError("a shared-prefix micro-batch must hold rows under one node")
        width = input_ids.size(1) - logits_to_keep
        start = node.end if node is not None else 0
        own = []
        for i, row in enumerate(rows):
            prompt = input_ids[i, :width][attention_mask[i, :width].bool()].tolist()
            if prompt != self.prompts[row]:
                raise RuntimeError(f"row {row} of the shared-prefix plan is not the row the loss scores")
            own.append(prompt[start:] + input_ids[i, width:].tolist())
        longest = max(len(o) for o in own)
        device = input_ids.device
        ids = torch.zeros((len(own), longest), dtype=torch.long, device=device)
        mask = torch.ones((len(own), start + longest), dtype=torch.long, device=device)
        positions = torch.full((len(own), longest), start, dtype=torch.long, device=device)
        for i, tokens in enumerate(own):  # left padding: every row's last positions line up
            pad = longest - len(tokens)
            ids[i, pad:] = torch.tensor(tokens, dtype=torch.long, device=device)
            mask[i, start:start + pad] = 0
            positions[i, pad:] = torch.arange(start, start + len(tokens), device=device)
        cache = None
        if node is not None:
            leaves = self.leaves_for(model, node, autocast)
            cache = DynamicCache(ddp_cache_data=[(k.expand(len(own), -1, -1, -1), v.expand(len(own), -1, -1, -1))
                                                 for k, v in leaves])
        with autocast():
            return model(input_ids=ids, attention_mask=mask, position_ids=positions, cache=cache,
                         use_cache=cache is not None, logits_to_keep=logits_to_keep + 1).logits

    def release(self, rows: Sequence[int]) -> None:
        """`rows` are done (their backward has run): backpropagate and free each node no row needs any more,
        deepest first (its gradient flows into its parent's leaves before the parent's turn)."""
        for row in rows:
            node = self.node_of[row]
            while node is not None:
                node.rows -= 1
                if node.rows == 0 and node.outputs is not None:
                    pairs = [(out, leaf.grad) for outs, leaves in zip(node.outputs, node.leaves or [])
                             for out, leaf in zip(outs, leaves) if out.requires_grad and leaf.grad is not None]
                    if pairs:
                        torch.autograd.backward([p[0] for p in pairs], [p[1] for p in pairs])
                    node.outputs = node.leaves = None
                node = node.parent

    def close(self) -> None:
        """Free every node's graph without backpropagating (after an error)."""
        for node in self.nodes:
            node.outputs = node.leaves = None


def _lcp(rows: Sequence[Sequence[int]], start: int) -> int:
    """The length of the prefix all `rows` share (they share at least `start` tokens)."""
    first, end = rows[0], min(len(r) for r in rows)
    i = start
    while i < end and all(r[i] == first[i] for r in rows[1:]):
        i += 1
    return i


def plan_rows(prompts: Sequence[Sequence[int]], completion_width: int, budget: int,
              min_tokens: int = MIN_NODE_TOKENS) -> PrefixPlan:
    """The prefix tree of `prompts` (each row keeps at least its last prompt token to itself) and the
    micro-batches: consecutive depth-first rows under the same deepest node while rows x (longest own part)
    stays within `budget` tokens (0: no limit; at least one row each)."""
    prompts = [list(p) for p in prompts]
    shared = [p[:-1] for p in prompts]  # what may be shared: the last prompt token is always a row's own
    order = sorted(range(len(prompts)), key=lambda i: shared[i])
    node_of: list[Node | None] = [None] * len(prompts)

    def build(group: list[int], start: int, parent: Node | None) -> None:
        if len(group) < 2:
            for row in group:
                node_of[row] = parent
            return
        end = _lcp([shared[i] for i in group], start)
        if end - start >= min_tokens:
            parent = Node(start, end, shared[group[0]][start:end], parent)
            start = end
        # rows ending here stay with `parent`; the others part by their next token (contiguous: sorted)
        for row in group:
            if len(shared[row]) <= end:
                node_of[row] = parent
        parts: dict[int, list[int]] = {}
        for row in group:
            if len(shared[row]) > end:
                parts.setdefault(shared[row][end], []).append(row)
        for part in parts.values():
            build(part, start, parent)

    build(order, 0, None)
    for row in range(len(prompts)):
        for node in node_of[row].path() if node_of[row] is not None else []:
            node.rows += 1
    plan = PrefixPlan(prompts, node_of, completion_width=completion_width)
    current: list[int] = []
    longest = 0
    for row in order:
        own = len(prompts[row]) - (node_of[row].end if node_of[row] else 0) + completion_width
        if current and (node_of[row] is not node_of[current[0]]
                        or (budget > 0 and (len(current) + 1) * max(longest, own) > budget)):
            plan.groups.append(current)
            current, longest = [], 0
        current.append(row)
        longest = max(longest, own)
    if current:
        plan.groups.append(current)
    return plan
