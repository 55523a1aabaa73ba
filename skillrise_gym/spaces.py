"""A text space that contains real text, and a list of such texts.

Gymnasium's `spaces.Text` defaults to an alphanumeric charset, so punctuation, newlines and unicode (what
engines and LLMs produce) are not "in" it, and a full unicode charset makes its repr unreadable. Like
MiniGrid's `MissionSpace`, `TextSpace` accepts any `str` up to `max_length` characters and samples short
printable strings. `TextList` is a `Sequence` of them (the admissible actions).

Both work in `gym.make_vec(..., vectorization_mode="async")` with its default shared memory: each env's
slot is a byte buffer (an 8-byte length, then UTF-8) of `shared_bytes` bytes, `max_length` by default, so
one text of at most `max_length` characters fits unless it is mostly non-ASCII; a text that does not fit
raises ValueError naming the limit and the fix (`vector_kwargs={"shared_memory": False}` lifts it).
"""

from __future__ import annotations

import collections.abc
import json
import string
from typing import Any

import numpy as np
from gymnasium.spaces import Sequence, Space
from gymnasium.vector.utils import create_shared_memory, read_from_shared_memory, write_to_shared_memory

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


class TextList(Sequence):
    """A list of `TextSpace` strings (a gymnasium `Sequence`, stack=False) that async vector envs can
    share: the list goes through shared memory as one JSON text of at most `shared_bytes` bytes."""

    def __init__(self, item: TextSpace, shared_bytes: int = 1_000_000, seed: Any = None) -> None:
        super().__init__(item, stack=False, seed=seed)
        self.shared_bytes = int(shared_bytes)

    def __repr__(self) -> str:
        return f"TextList({self.feature_space!r})"


_HEADER = 8


def _capacity(space: TextSpace | TextList) -> int:
    return int(getattr(space, "shared_bytes", None) or space.max_length)


@create_shared_memory.register(TextSpace)
@create_shared_memory.register(TextList)
def _create_text_buffer(space: Any, n: int = 1, ctx: Any = None) -> Any:
    import multiprocessing as mp

    return (ctx or mp).Array("B", n * (_HEADER + _capacity(space)), lock=False)


def _encode(space: Any, value: Any) -> bytes:
    text = json.dumps(list(value), ensure_ascii=False) if isinstance(space, TextList) else value
    return str(text).encode("utf-8", "surrogatepass")


@write_to_shared_memory.register(TextSpace)
@write_to_shared_memory.register(TextList)
def _write_text_buffer(space: Any, index: int, value: Any, shared_memory: Any) -> None:
    data = _encode(space, value)
    size = _HEADER + _capacity(space)
    if len(data) > _capacity(space):
        raise ValueError(
            f"a {type(space).__name__} value of {len(data)} UTF-8 bytes does not fit the {_capacity(space)} bytes "
            "of its shared-memory slot; make the vector env with vector_kwargs={'shared_memory': False}"
        )
    view = np.frombuffer(shared_memory, dtype=np.uint8)
    start = index * size
    view[start:start + _HEADER] = np.frombuffer(len(data).to_bytes(_HEADER, "little"), dtype=np.uint8)
    view[start + _HEADER:start + _HEADER + len(data)] = np.frombuffer(data, dtype=np.uint8)


class SharedTexts(collections.abc.Sequence):
    """The texts of a shared-memory slot, decoded on access. `AsyncVectorEnv` reads its observation buffer
    once and hands out copies of it (`copy=True`, the default): a deep copy of this is a plain tuple of
    the texts at that moment; with `copy=False` it is this live view, as for gymnasium's arrays."""

    def __init__(self, space: Any, shared_memory: Any, n: int) -> None:
        self._space, self._view, self._n = space, np.frombuffer(shared_memory, dtype=np.uint8), int(n)
        self._size = _HEADER + _capacity(space)

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return tuple(self[i] for i in range(*index.indices(self._n)))
        if not -self._n <= index < self._n:
            raise IndexError(index)
        start = (index % self._n) * self._size
        length = int.from_bytes(self._view[start:start + _HEADER].tobytes(), "little")
        text = self._view[start + _HEADER:start + _HEADER + length].tobytes().decode("utf-8", "surrogatepass")
        if isinstance(self._space, TextList):  # an unwritten slot (length 0) reads as an empty list
            return tuple(json.loads(text)) if text else ()
        return text

    def __deepcopy__(self, memo: dict) -> tuple[Any, ...]:
        return tuple(self)

    def __eq__(self, other: object) -> bool:
        return tuple(self) == (tuple(other) if isinstance(other, collections.abc.Sequence) else other)

    def __repr__(self) -> str:
        return f"SharedTexts({tuple(self)!r})"


@read_from_shared_memory.register(TextSpace)
@read_from_shared_memory.register(TextList)
def _read_text_buffer(space: Any, shared_memory: Any, n: int = 1) -> SharedTexts:
    return SharedTexts(space, shared_memory, n)
