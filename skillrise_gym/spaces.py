"""A text space that contains real text.

Gymnasium's `spaces.Text` defaults to an alphanumeric charset, so punctuation, newlines and unicode (what
engines and LLMs produce) are not "in" it, and a full unicode charset makes its repr unreadable. Like
MiniGrid's `MissionSpace`, this space accepts any `str` up to `max_length` characters and samples short
printable strings.
"""

from __future__ import annotations

import string
from typing import Any

import numpy as np
from gymnasium.spaces import Space

_SAMPLE_CHARSET = np.array(list(string.ascii_letters + string.digits + " .,:;!?'-()[]\n"))


class TextSpace(Space[str]):
    """Any Python string of at most `max_length` characters."""

    def __init__(self, max_length: int = 1_000_000, seed: int | np.random.Generator | None = None) -> None:
        if max_length < 1:
            raise ValueError("max_length must be positive")
        self.max_length = int(max_length)
        super().__init__(dtype=str, seed=seed)

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        length = int(self.np_random.integers(1, min(self.max_length, 64) + 1))
        return "".join(self.np_random.choice(_SAMPLE_CHARSET, size=length))

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and len(x) <= self.max_length

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def __repr__(self) -> str:
        return f"TextSpace(max_length={self.max_length})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TextSpace) and other.max_length == self.max_length
