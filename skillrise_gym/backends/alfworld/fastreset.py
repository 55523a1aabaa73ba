"""Fast resets: a content-keyed disk cache for the deterministic work TextWorld redoes on every reset.

Where the time goes (textworld 1.7.0): loading and resetting a PDDL game builds `PddlState` twice (in
`PddlEnv.load` and `PddlEnv.reset`), and each build calls `fast_downward.pddl2sas` twice (plain, and
optimised for replanning): four PDDL-to-SAS translations, most of a reset. Parsing the game's grammar
(`textworld.envs.pddl.logic._parse_and_convert`, tatsu) is most of the rest (reset and step times, stock and
ours: `alfworld_env.py`, benchmarks/). Both are pure functions of
their text inputs, and both are looked up as module attributes at call time, which gives a seam:
`engine_caches(cache)` swaps in cached versions for the duration of a `with` block (our own loads and
resets only: the stock engine in the same process is untouched).

Cache entries are keyed by sha256 over the library versions, the kind, and the exact input text, so a
changed game, grammar or library version can never be served a stale result. Values are pickled then
zlib-compressed, written to a temporary file and renamed into place (safe for several worker processes;
a killed writer leaves at most a stray temporary file). An unreadable entry is recomputed and rewritten.
Each hit returns a freshly unpickled object, as a fresh computation would.

Steps (and the end of every reset): `_gather_infos` derives every admissible command through the text
grammar, re-parsing the same short symbol strings and conjunctive queries with tatsu each time. With
`memo_parses=True` those parses (pure functions of the string) are memoised in memory and deep-copied on
each use, because the engine mutates the symbols it derives.
"""

from __future__ import annotations

import copy
import hashlib
import os
import pickle
import sys
import zlib
from collections import OrderedDict
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from skillrise_gym.paths import atomic_write

#: bump when the stored format or what is stored changes
CACHE_FORMAT = "alfworld-reset-cache-1"


def engine_versions() -> str:
    """Versions of everything whose output is cached; part of every key."""
    from importlib.metadata import PackageNotFoundError, version

    parts = []
    for dist in ("textworld", "fast-downward-textworld", "TatSu", "alfworld"):
        try:
            parts.append(f"{dist}={version(dist)}")
        except PackageNotFoundError:
            parts.append(f"{dist}=?")
    return ";".join(parts + [f"python={sys.version_info[0]}.{sys.version_info[1]}"])


class TranslationCache:
    """Disk cache (plus a small in-memory LRU of serialised values) for pure text-to-object functions."""

    def __init__(self, folder: str | os.PathLike, memory_items: int = 16) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.memory_items = memory_items
        self._memory: OrderedDict[str, bytes] = OrderedDict()
        self._versions = engine_versions()
        self.hits = 0
        self.misses = 0

    def key(self, kind: str, *parts: str | bool) -> str:
        digest = hashlib.sha256(f"{CACHE_FORMAT}\n{self._versions}\n{kind}\n".encode())
        for part in parts:
            data = str(part).encode("utf-8", "surrogatepass")
            digest.update(len(data).to_bytes(8, "little"))
            digest.update(data)
        return digest.hexdigest()

    def _path(self, key: str) -> Path:
        return self.folder / key[:2] / f"{key}.pkl.z"

    def _remember(self, key: str, blob: bytes) -> None:
        self._memory[key] = blob
        self._memory.move_to_end(key)
        while len(self._memory) > self.memory_items:
            self._memory.popitem(last=False)

    def _load(self, key: str) -> Any | None:
        blob = self._memory.get(key)
        if blob is None:
            try:
                blob = zlib.decompress(self._path(key).read_bytes())
            except (OSError, zlib.error):
                return None
        try:
            value = pickle.loads(blob)
        except Exception:  # a truncated or foreign file: treat as a miss and rewrite it
            return None
        self._remember(key, blob)
        return value

    def _store(self, key: str, value: Any) -> None:
        blob = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        self._remember(key, blob)
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            atomic_write(path, zlib.compress(blob, 1))
        except OSError:
            pass  # a full disk costs speed, never correctness

    def get_or_compute(self, kind: str, parts: tuple[str | bool, ...], compute: Callable[[], Any]) -> Any:
        key = self.key(kind, *parts)
        value = self._load(key)
        if value is not None:
            self.hits += 1
            return value
        self.misses += 1
        value = compute()
        self._store(key, value)
        # Hand out an unpickled copy, as hits do, so that callers never share state with the cache.
        return pickle.loads(self._memory[key]) if key in self._memory else value

    def size_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.folder.glob("*/*.pkl.z"))


class _ParseMemo:
    """In-memory memo of a pure parse function; returns deep copies because callers mutate results."""

    def __init__(self, func: Callable[..., Any], rules: frozenset[str] | None = None, max_items: int = 4096) -> None:
        self.func = func
        self.rules = rules  # memoise only these grammar rules (None: all)
        self.max_items = max_items
        self._memo: dict[tuple, Any] = {}

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("trace") or (self.rules is not None and kwargs.get("rule_name") not in self.rules):
            return self.func(*args, **kwargs)
        try:
            key = (args, tuple(sorted(kwargs.items())))
            hash(key)
        except TypeError:
            return self.func(*args, **kwargs)
        if key not in self._memo:
            if len(self._memo) >= self.max_items:
                self._memo.clear()
            self._memo[key] = self.func(*args, **kwargs)
        return copy.deepcopy(self._memo[key])


_STEP_MEMOS: dict[str, _ParseMemo] = {}


@contextmanager
def engine_caches(cache: TranslationCache | None, memo_parses: bool = True) -> Iterator[None]:
    """Within the block, PDDL translations and grammar parses come from `cache`, and (with
    `memo_parses`) the grammar's per-step parses from an in-memory memo. Restores the originals after."""
    import fast_downward
    import textworld.logic as tw_logic
    from textworld.envs.pddl import logic as pddl_logic
    from textworld.envs.pddl import textgen

    saved = (fast_downward.pddl2sas, pddl_logic._parse_and_convert, textgen._parse_and_convert,
             tw_logic._parse_and_convert, textgen.EvalSymbol.derive, textgen.copy_context, pddl_logic.PddlState)
    original_pddl2sas, original_grammar_parse, original_symbols_parse, original_logic_parse, _derive = saved[:5]
    textgen.EvalSymbol.derive = _derive_with_explicit_names  # Python 3.13 (see its docstring)

    if cache is not None:

        def translate(domain: str, problem: str, verbose: bool, optimize: bool):
            argv = sys.argv  # fast_downward rebinds sys.argv for its option parser: put it back
            try:
                return original_pddl2sas(domain, problem, verbose=verbose, optimize=optimize)
            finally:
                sys.argv = argv

        def cached_translation(domain: str, problem: str, optimize: bool):
            return cache.get_or_compute(
                "pddl2sas", (domain, problem, bool(optimize)), lambda: translate(domain, problem, False, optimize)
            )

        def pddl2sas(domain: str, problem: str, verbose: bool = False, optimize: bool = False):
            if verbose:
                return translate(domain, problem, verbose, optimize)
            if optimize:
                # Only `PddlState.__init__` asks for this (the replanning task), and within this block that is
                # `_LazyReplanState`, which translates it when it first replans (see its docstring).
                return None, _DeferredSAS(lambda: cached_translation(domain, problem, True)[1])
            return cached_translation(domain, problem, False)

        def parse_and_convert(*args: Any, **kwargs: Any):
            if len(args) == 1 and isinstance(args[0], str) and kwargs == {"rule_name": "pddlStart"}:
                return cache.get_or_compute(
                    "grammar", (args[0],), lambda: original_grammar_parse(*args, **kwargs)
                )
            return original_grammar_parse(*args, **kwargs)

        fast_downward.pddl2sas = pddl2sas
        pddl_logic._parse_and_convert = parse_and_convert
        pddl_logic.PddlState = _lazy_replan_state_class(saved[6])
    if memo_parses:
        memo = _STEP_MEMOS.get("symbols")
        if memo is None or memo.func is not original_symbols_parse:
            memo = _STEP_MEMOS["symbols"] = _ParseMemo(original_symbols_parse)
        textgen._parse_and_convert = memo
        query_memo = _STEP_MEMOS.get("queries")
        if query_memo is None or query_memo.func is not original_logic_parse:
            query_memo = _STEP_MEMOS["queries"] = _ParseMemo(original_logic_parse, rules=frozenset({"conjunctiveQuery"}))
        tw_logic._parse_and_convert = query_memo
        textgen.copy_context = _copy_context_sharing_values
    try:
        yield
    finally:
        (fast_downward.pddl2sas, pddl_logic._parse_and_convert, textgen._parse_and_convert,
         tw_logic._parse_and_convert, textgen.EvalSymbol.derive, textgen.copy_context, pddl_logic.PddlState) = saved


def _copy_context_sharing_values(context: dict) -> dict:
    """textworld's `textgen.copy_context` without its two deep copies (which dominated a step's time).

    The grammar derivation copies its context at every symbol and query; the copy's `variables` and `mapping`
    dicts must be new (the derivation adds entries to them) but their values (`EntityInfo`s, logic `Variable`s
    and `Placeholder`s) are only ever read: by `{o.name}`-style eval symbols and by the logic's matching.
    textworld itself shares the very same `EntityInfo`s through `entity_infos` and the variables that
    `query` binds, so sharing them here derives the same text (the parity tests compare every observation
    and admissible command with the stock engine's)."""
    return {
        "state": context["state"],
        "facts": context["facts"],
        "variables": dict(context["variables"]),
        "mapping": dict(context["mapping"]),
        "entity_infos": context["entity_infos"],
    }


class _DeferredSAS(str):
    """The replanning SAS task, translated on first use. It reads as "" until then: `PddlState.__init__`
    hands it to fast-downward's `load_sas_replan`, which only stores the text for `replan`."""

    def __new__(cls, compute: Callable[[], str]) -> "_DeferredSAS":
        value = super().__new__(cls, "")
        value.compute = compute
        return value


_LAZY_STATE_CLASSES: dict[type, type] = {}


def _lazy_replan_state_class(base: type) -> type:
    """`PddlState` whose replanning task (the second, optimised PDDL-to-SAS translation each state makes: half
    the translations of a cold reset) is translated only when the state first replans. fast-downward's
    `load_sas_replan` just stores the text (`sas_replan = string(input)`) for `replan`; nothing else reads
    it, and our engine never replans (no `policy_commands`, walkthroughs come from the game files)."""
    cls = _LAZY_STATE_CLASSES.get(base)
    if cls is None:

        class _LazyReplanState(base):  # type: ignore[misc, valid-type]
            def replan(self, infos):
                if isinstance(self.sas_replan, _DeferredSAS):
                    self.sas_replan = self.sas_replan.compute()
                # Load this state's own task (another state may have stored its own text since).
                self.downward_lib.load_sas_replan(self.sas_replan.encode("utf-8"))
                return super().replan(infos)

        cls = _LAZY_STATE_CLASSES[base] = _LazyReplanState
    return cls


def _derive_with_explicit_names(self: Any, context: Any = None) -> list:
    """textworld 1.7.0's `EvalSymbol.derive`, made to work on Python 3.13.

    The original puts a grammar's variables into `locals()` and calls a bare `eval`, which sees them only
    while `locals()` is the frame's own dict (Python <= 3.12); PEP 667 made it a snapshot in 3.13, so every
    ALFWorld reset failed with `NameError`. This evaluates the same expression with the same names passed
    explicitly: the module's globals, then `self`, `context` and the variables, as `locals().update` layered
    them. Installed only inside `engine_caches` (our loads, resets and steps), so the parity tests compare it
    with the stock engine's own evaluation on the versions where that works."""
    from textworld.envs.pddl import textgen

    context = context or self.context
    names = {"self": self, "context": context, **context["variables"]}
    return [textgen.TerminalSymbol(eval(self.expression, vars(textgen), names))]  # the engine's own grammar


def clear_proposition_table() -> None:
    """Empty the `mementos` de-duplication table that textworld's Propositions and Signatures go through.

    It only grows (about 1.4 MB per distinct game); its entries are interchangeable with fresh objects
    because textworld compares these by value, so clearing it between games keeps memory flat.
    """
    import mementos.core

    mementos.core._memento_cache.clear()
