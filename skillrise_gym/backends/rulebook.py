"""Rulebook: a transfer probe. Success on later tasks of a sequence depends only on what earlier tasks revealed.

Every family has R hidden rules shared by all its tasks: an item's material (its *kind*: glass, paper, ...)
decides which of the family's N bins it goes in ("glass goes in the blue bin"). Each task shows one item in
its own words (size, finish, brand, object, distractor sentences) and the family's bins as commands::

    task:        sort a large dusty Voltix jar made of glass into the right bin.
    observation: It was found near the window. Bins: red bin, blue bin, green bin, yellow bin.
    action:      blue bin
    feedback:    Correct: the Voltix jar is glass, and glass items go in the blue bin.   (success)
                 Wrong bin: the Voltix jar is glass, and glass items go in the blue bin. (failure)

With ``feedback="success"`` a wrong answer gets only "Wrong bin: the Voltix jar does not go in the red bin."
(the rule is stated on success alone): a second attempt at the same task must then explore the other bins,
which makes repeat mode (Pass@k) a test of exploration, not of reading the last feedback (the setting of
the LaMer comparison, docs/train.md).

The feedback states the rule that applied, in that instance's words, after the first answer; the default
per-task step limit is 1, so a task is solved only from what the agent knew before it started. Carrying a
rule forward needs abstraction: the curator must keep "glass -> blue bin" and drop "large dusty Voltix jar".
Families differ in their rules (each kind's bin is drawn uniformly from the family's bins), and nothing in
a task names its family, so a policy that memorises rules cannot beat chance on another family.

Ceilings (`RulebookBackend.ceilings`, exact for the tasks a split holds and the sampler's draws):
- an agent that ignores the document: 1/N at every position (the right bin is independent of everything a
  task shows);
- a perfect curator (keeps every revealed rule and applies it): P_i + (1 - P_i)/N at position i, where
  P_i = P(the kind of task i appeared among tasks 0..i-1). With kinds drawn independently,
  P_i = 1 - (1 - 1/R)^i; the sampler draws K distinct tasks of a finite family, so the exact value is
  computed from the family's task list (`exact_seen_probability`). Both rise with the position, hence
  with K.

Splits: ``train`` and ``test`` hold disjoint families (drawn from different seeds); test instances also use
words never seen in training (objects and brands held out of ``train``). Difficulty = the number of
distractor sentences (0..`max_distractors`). The expert knows the rules (the oracle solver).

K: a cross sequence needs K distinct tasks of one family, so K <= `tasks_per_family` (default 12); a larger
K raises ValueError when the first sequence is drawn (raise `tasks_per_family` to serve it).
"""

from __future__ import annotations

from functools import lru_cache
from math import comb
from typing import Any, ClassVar, Sequence

import numpy as np

from skillrise_gym.backends.base import Backend, StepResult
from skillrise_gym.tasks import Task

KINDS = ("glass", "paper", "metal", "plastic", "wood", "cloth", "rubber", "ceramic", "stone", "leather",
         "wax", "cork")
BIN_COLOURS = ("red", "blue", "green", "yellow", "white", "black", "orange", "purple")
SIZES = ("small", "large", "tiny", "tall", "flat", "round")
FINISHES = ("dusty", "shiny", "matte", "striped", "worn", "clean")
#: the last `HELD_OUT` objects and brands appear only in the test split
OBJECTS = ("jar", "box", "cup", "tray", "bowl", "tube", "lid", "crate", "plate", "rod", "bag", "sheet",
           "vase", "spool", "ladle", "token")
BRANDS = ("Voltix", "Acme", "Norda", "Pelko", "Zumi", "Brisk", "Kavo", "Lumo", "Orvo", "Tessa", "Dalu", "Miro",
          "Quen", "Ferra", "Yolo", "Haxa")
HELD_OUT = 4
PLACES = ("window", "door", "shelf", "desk", "sink", "stairs", "garden", "garage")
DISTRACTORS = (
    "It was found near the {place}.",
    "Someone left it by the {place}.",
    "Its label is hard to read.",
    "It smells faintly of pine.",
    "It is slightly warm.",
    "A sticker on it says {brand}.",
)
SPLIT_SEEDS = {"train": 0, "test": 1}
#: `novel` option: which answers the test split draws from pools never used in training
NOVEL = ("none", "kinds", "colours", "both")
#: what a wrong answer's feedback says: the rule (full) or only that this bin is wrong (success)
FEEDBACK = ("full", "success")
#: with novel kinds, the test split's kinds (the last of KINDS); with novel colours, its bin colours
NOVEL_KINDS, NOVEL_COLOURS = KINDS[-4:], BIN_COLOURS[-4:]


def answer_pools(split: str, novel: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(kinds, bin colours) the families of `split` draw from: all of them, or, with `novel`, disjoint pools
    for train and test (held-out answers: a test family's rules use kinds or colours training never saw)."""
    kinds, colours = KINDS, BIN_COLOURS
    if novel in ("kinds", "both"):
        kinds = NOVEL_KINDS if split == "test" else KINDS[: -len(NOVEL_KINDS)]
    if novel in ("colours", "both"):
        colours = NOVEL_COLOURS if split == "test" else BIN_COLOURS[: -len(NOVEL_COLOURS)]
    return kinds, colours


def bin_command(colour: str) -> str:
    return f"{colour} bin"


class RulebookBackend(Backend):
    """The transfer probe (see the module docstring). All sizes are constructor options.

    Args:
        num_families: families per split.
        tasks_per_family: tasks of each family (the largest K a sequence can have).
        rules: R, kinds per family (each with its hidden bin).
        bins: N, bins per family (chance is 1/N).
        palette: colours the families draw their N bins from (default N: every family has the same bins,
            red, blue, ... in that order; more colours give families different bins too).
        max_distractors: most distractor sentences in a task (its difficulty).
        seed: generates every family; the same seed gives the same tasks everywhere.
        novel: held-out answers: "kinds", "colours" or "both" make the test split's families use kinds
            (stone, leather, wax, cork), bin colours (white, black, orange, purple) or both that no training
            family uses (training then draws from the other 8 kinds and 4 colours); "none" (default): every
            split draws from all of them.
    """

    benchmark: ClassVar[str] = "rulebook"
    splits: ClassVar[tuple[str, ...]] = ("train", "test")
    default_max_task_steps: ClassVar[int] = 1
    prompt_style: ClassVar[str] = "compact"

    def __init__(self, num_families: int = 200, tasks_per_family: int = 12, rules: int = 2, bins: int = 4,
                 palette: int | None = None, max_distractors: int = 2, seed: int = 0, novel: str = "none",
                 feedback: str = "full") -> None:
        palette = bins if palette is None else palette
        if novel not in NOVEL:
            raise ValueError(f"rulebook novel must be one of {', '.join(NOVEL)}, got {novel!r}")
        if feedback not in FEEDBACK:
            raise ValueError(f"rulebook feedback must be one of {', '.join(FEEDBACK)}, got {feedback!r}")
        self.feedback = feedback
        # every split's pools must serve R kinds and N bins (held-out answers make them smaller)
        kinds = min(len(answer_pools(split, novel)[0]) for split in self.splits)
        colours = min(len(answer_pools(split, novel)[1]) for split in self.splits)
        checks = {
            "num_families": (num_families, 1, 1_000_000),
            "tasks_per_family": (tasks_per_family, 1, 10_000),
            "rules": (rules, 1, kinds),
            "bins": (bins, 2, colours),
            "max_distractors": (max_distractors, 0, len(DISTRACTORS)),
            "palette": (palette, bins if isinstance(bins, int) else 2, colours),
        }
        for name, (value, low, high) in checks.items():
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or not low <= value <= high:
                held = f" (with novel={novel})" if novel != "none" and name in ("rules", "bins", "palette") else ""
                raise ValueError(f"rulebook {name} must be an integer in [{low}, {high}]{held}, got {value!r}")
        if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool):
            raise ValueError(f"rulebook seed must be an integer, got {seed!r}")
        self.num_families, self.tasks_per_family = int(num_families), int(tasks_per_family)
        self.rules, self.bins, self.max_distractors, self.seed = int(rules), int(bins), int(max_distractors), int(seed)
        self.palette = int(palette)
        self.novel = novel
        self._task: Task | None = None
        self._answered = False

    @classmethod
    def validate_options(cls, options: dict[str, Any]) -> None:
        """Every value checked as the constructor checks it (R, N, palette against the answer pools, novel,
        feedback), before anything starts: the constructor is cheap (tasks are generated on first use)."""
        cls(**options)

    # ----------------------------------------------------------------- generation
    def list_tasks(self, split: str) -> list[Task]:
        self.check_split(split)
        return list(_generate(split, self.num_families, self.tasks_per_family, self.rules, self.bins, self.palette,
                              self.max_distractors, self.seed, self.novel))

    # ----------------------------------------------------------------- episode
    def reset(self, task: Task) -> StepResult:
        if task.benchmark != self.benchmark or "bin" not in task.payload:
            raise ValueError(f"not a rulebook task: {task.id!r}")
        self._task, self._answered = task, False
        p = task.payload
        bins = ", ".join(bin_command(b) for b in p["bins"])
        text = " ".join(list(p["distractors"]) + [f"Bins: {bins}."])
        return StepResult(observation=text)

    def task_description(self) -> str:
        p = self._payload()
        return f"sort {p['item']} made of {p['kind']} into the right bin."

    def step(self, action: str) -> StepResult:
        p = self._payload()
        command = " ".join(action.strip().lower().split())
        if command not in {bin_command(b) for b in p["bins"]}:
            return StepResult(observation="Nothing happens. Answer with one of the bins.")
        rule = f"the {p['brand']} {p['object']} is {p['kind']}, and {p['kind']} items go in the {p['bin']} bin."
        if command == bin_command(p["bin"]):
            return StepResult(observation=f"Correct: {rule}", score=1.0, done=True, success=True)
        if self.feedback == "success":
            return StepResult(observation=f"Wrong bin: the {p['brand']} {p['object']} does not go in the {command}.")
        return StepResult(observation=f"Wrong bin: {rule}")

    def admissible_actions(self) -> list[str]:
        return [bin_command(b) for b in self._payload()["bins"]]

    def expert_action(self) -> str | None:
        return bin_command(self._payload()["bin"])

    @classmethod
    def facts(cls, task: Task) -> list[tuple[str, ...]]:
        """The rule the task's feedback reveals: its kind and its bin's colour."""
        return [(task.payload["kind"], task.payload["bin"])]

    @classmethod
    def instance_words(cls, task: Task) -> list[str]:
        return [task.payload["brand"], task.payload["object"]]

    def _payload(self) -> dict[str, Any]:
        if self._task is None:
            raise RuntimeError("reset() first")
        return dict(self._task.payload)

    # ----------------------------------------------------------------- ceilings
    def ceilings(self, K: int, split: str = "train") -> dict[str, list[float]]:
        """Success per position for an agent that ignores the document, and for a perfect curator (exact for
        this split's families and the sampler's draws of K distinct tasks sorted easy to hard). With
        feedback "success": chance, and the Pass@k of repeat mode for an agent that never repeats a wrong bin
        (k/N); no perfect-curator figure (what is revealed depends on the agent's own successes)."""
        chance = 1.0 / self.bins
        if self.feedback == "success":  # rules are revealed by successes only: what carries depends on the agent
            return {"ignore_document": [chance] * K,
                    "explore_pass_at_k": [min(1.0, (k + 1) / self.bins) for k in range(K)]}
        seen = exact_seen_probability(self.list_tasks(split), K)
        return {
            "ignore_document": [chance] * K,
            "perfect_curator": [p + (1.0 - p) * chance for p in seen],
            "seen_before": seen,
            "independent_kinds": [1.0 - (1.0 - 1.0 / self.rules) ** i + (1.0 - 1.0 / self.rules) ** i * chance
                                  for i in range(K)],
        }


@lru_cache(maxsize=16)
def _generate(split: str, num_families: int, tasks_per_family: int, rules: int, bins: int, palette_size: int,
              max_distractors: int, seed: int, novel: str = "none") -> tuple[Task, ...]:
    objects = OBJECTS if split == "test" else OBJECTS[:-HELD_OUT]
    brands = BRANDS if split == "test" else BRANDS[:-HELD_OUT]
    kind_pool, colour_pool = answer_pools(split, novel)
    tasks: list[Task] = []
    for f in range(num_families):
        rng = np.random.default_rng([seed, SPLIT_SEEDS[split], f])
        family = f"{split}-f{f:04d}"
        palette = [colour_pool[i] for i in sorted(rng.choice(palette_size, size=bins, replace=False))]
        kinds = [kind_pool[i] for i in rng.choice(len(kind_pool), size=rules, replace=False)]
        rulebook = {kind: palette[int(rng.integers(bins))] for kind in kinds}
        for n in range(tasks_per_family):
            kind = kinds[int(rng.integers(rules))]
            obj, brand = objects[int(rng.integers(len(objects)))], brands[int(rng.integers(len(brands)))]
            size, finish = SIZES[int(rng.integers(len(SIZES)))], FINISHES[int(rng.integers(len(FINISHES)))]
            count = int(rng.integers(max_distractors + 1))
            picks = rng.choice(len(DISTRACTORS), size=count, replace=False) if count else []
            distractors = [DISTRACTORS[int(i)].format(place=PLACES[int(rng.integers(len(PLACES)))],
                                                      brand=brands[int(rng.integers(len(brands)))]) for i in picks]
            tasks.append(Task(
                benchmark="rulebook", id=f"{family}-t{n:02d}", family=family, difficulty=float(count), split=split,
                payload={"kind": kind, "bin": rulebook[kind], "bins": palette, "object": obj, "brand": brand,
                         "item": f"a {size} {finish} {brand} {obj}", "distractors": distractors},
            ))
    return tuple(tasks)


def exact_seen_probability(tasks: Sequence[Task], K: int) -> list[float]:
    """P(the kind of the task at position i appeared at an earlier position), for i = 0..K-1, averaged over
    families in proportion to their size (as the sampler draws them), for cross sequences of K distinct tasks
    of one family sorted by (difficulty, id).

    For a family of M tasks in sorted order, the task at sorted index b lands at position i when the sampler
    picks i of the b tasks before it and K-1-i of the M-1-b after it; its kind is unseen when those i earlier
    picks avoid the s_b earlier tasks of its kind: sum_b C(b - s_b, i) C(M-1-b, K-1-i) / C(M, K).
    """
    from skillrise_gym.sequences import order_easy_to_hard

    by_family: dict[str, list[Task]] = {}
    for task in tasks:
        by_family.setdefault(task.family, []).append(task)
    usable = {name: order_easy_to_hard(group) for name, group in by_family.items() if len(group) >= K}
    if not usable:
        raise ValueError(f"K={K} is larger than every family")
    total = sum(len(g) for g in usable.values())
    seen = np.zeros(K)
    for group in usable.values():
        M = len(group)
        unseen = np.zeros(K)
        counts: dict[str, int] = {}
        for b, task in enumerate(group):
            same_before = counts.get(task.payload["kind"], 0)
            for i in range(K):
                unseen[i] += comb(b - same_before, i) * comb(M - 1 - b, K - 1 - i)
            counts[task.payload["kind"]] = same_before + 1
        seen += (1.0 - unseen / comb(M, K)) * (M / total)
    return [float(x) for x in seen]
