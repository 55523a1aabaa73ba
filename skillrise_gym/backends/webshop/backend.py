"""`WebShopBackend`: the WebShop text environment behind the project's `Backend` interface."""

from __future__ import annotations

import os
from typing import Any, ClassVar

from skillrise_gym.backends.base import ActionGrammar, Backend, StepResult
from skillrise_gym.tasks import Task

SEARCH_PLACEHOLDER = "search[<your query>]"


class WebShopBackend(Backend):
    """WebShop on the upstream catalog (when `data_dir` holds it) or on a generated one.

    Args:
        data_dir: folder with the upstream files (default ``$WEBSHOP_DATA``). Unset, or lacking
            items_shuffle_1000.json / items_ins_v2_1000.json (and items_human_ins.json for human goals):
            a generated catalog is used. Present files with a wrong size or hash raise `DataIntegrityError`.
        num_products: size of the generated catalog (ignored with upstream files).
        catalog_seed: seed of the generated catalog.
        human_goals: human-instruction goals instead of synthetic ones (verl-agent's default is synthetic).
        goal_seed: seeds the goal shuffle (233 = upstream's `random.seed(233)`), the load-time prices of
            products with a price range and the goal price ceilings (upstream leaves those two unseeded).
        noun_matcher: title-noun extraction for the type reward: "spacy" (needs an English spaCy pipeline),
            "fallback" (content-word heuristic), or "auto" (spaCy when available).
        reward_quirks: reproduce upstream's colour-normalisation quirks (default True; False fixes them).
        cache_index: keep the BM25 index on disk under the cache folder.
    """

    benchmark: ClassVar[str] = "webshop"
    splits: ClassVar[tuple[str, ...]] = ("test", "eval", "train")
    #: a few more than the reference's 12 turns: the expert needs at most 11 even with paging
    default_max_task_steps: ClassVar[int] = 15
    admissible_by_default: ClassVar[bool] = True
    #: inclusive bounds checked when an env is made (`check_options`); a generated catalog of 10**9 products
    #: would take days to build (upstream's full catalog has 1.18 M products)
    option_ranges: ClassVar[dict[str, tuple[float, float]]] = {"num_products": (1, 2_000_000)}

    @classmethod
    def data_identity(cls, options: dict[str, Any]) -> dict[str, str]:
        """The upstream files (verified against their known digests) when the data folder holds them, else
        the generated catalog's version, generator source, seed and size."""
        import hashlib
        from pathlib import Path

        from skillrise_gym.backends.webshop import generator
        from skillrise_gym.backends.webshop.catalog import upstream_paths

        data_dir = options.get("data_dir") or os.environ.get("WEBSHOP_DATA") or None
        paths = upstream_paths(data_dir, bool(options.get("human_goals", False)))
        if paths is not None:
            files = sorted(f"{p.name}:{p.stat().st_size}" for p in paths.values() if p is not None)
            return {"source": f"upstream:{Path(paths['products']).parent}", "fingerprint": "upstream:" + ",".join(files)}
        source = hashlib.sha256(Path(generator.__file__).read_bytes()).hexdigest()[:10]
        seed, size = int(options.get("catalog_seed", 0)), int(options.get("num_products", 1000))
        return {"source": "generated", "fingerprint": f"generated:v{generator.GENERATOR_VERSION}-{source}-seed{seed}-n{size}"}

    def __init__(
        self,
        data_dir: str | os.PathLike | None = None,
        num_products: int = 1000,
        catalog_seed: int = 0,
        human_goals: bool = False,
        goal_seed: int = 233,
        noun_matcher: str = "auto",
        reward_quirks: bool = True,
        cache_index: bool = True,
    ) -> None:
        from skillrise_gym.backends import require

        require("bm25s", "webshop", "The WebShop backend")
        require("rapidfuzz", "webshop", "The WebShop backend")
        if noun_matcher not in ("spacy", "fallback", "auto"):
            raise ValueError(f"noun_matcher must be 'spacy', 'fallback' or 'auto', got {noun_matcher!r}")
        if int(num_products) < 1:
            raise ValueError(f"num_products must be positive, got {num_products!r}")
        from skillrise_gym.backends.webshop.engine import ShopConfig

        data_dir = data_dir if data_dir is not None else os.environ.get("WEBSHOP_DATA") or None
        self.config = ShopConfig(
            data_dir=str(data_dir) if data_dir else None,
            num_products=int(num_products),
            catalog_seed=int(catalog_seed),
            human_goals=bool(human_goals),
            goal_seed=int(goal_seed),
            noun_matcher=noun_matcher,
            cache_index=bool(cache_index),
        )
        self.reward_quirks = bool(reward_quirks)
        self._shop = None
        self._engine = None
        self._task: Task | None = None

    # ------------------------------------------------------------------------------------- engine

    @property
    def shop(self):
        """The shared catalog/goals/index, built on first use."""
        if self._shop is None:
            from skillrise_gym.backends.webshop.engine import get_shop

            self._shop = get_shop(self.config)
        return self._shop

    @property
    def engine(self):
        if self._engine is None:
            from skillrise_gym.backends.webshop.engine import WebShopEngine

            self._engine = WebShopEngine(self.shop, reward_quirks=self.reward_quirks)
        return self._engine

    # ------------------------------------------------------------------------------------- tasks

    def list_tasks(self, split: str) -> list[Task]:
        from skillrise_gym.backends.webshop.goals import goal_difficulty, split_range

        self.check_split(split)
        goals = self.shop.goals
        return [
            Task(
                benchmark=self.benchmark,
                id=f"goal-{i}",
                family=goals[i]["category"],
                difficulty=float(goal_difficulty(goals[i])),
                split=split,
                payload={"goal_index": i, "asin": goals[i]["asin"]},
            )
            for i in split_range(split, len(goals))
        ]

    def _goal_index(self, task: Task) -> int:
        if task.benchmark != self.benchmark:
            raise ValueError(f"task {task.id!r} belongs to {task.benchmark!r}, not webshop")
        index = task.payload.get("goal_index")
        if index is None and task.id.startswith("goal-") and task.id[5:].isdigit():
            index = int(task.id[5:])
        if not isinstance(index, int) or not 0 <= index < len(self.shop.goals):
            raise ValueError(f"task {task.id!r} names no goal of this catalog ({len(self.shop.goals)} goals)")
        return index

    # ------------------------------------------------------------------------------------- play

    def reset(self, task: Task) -> StepResult:
        index = self._goal_index(task)
        self._task = task
        observation = self.engine.reset(index)
        return StepResult(observation=observation, info={"page": "search", "goal_index": index,
                                                         "instruction_text": self.engine.instruction_text})

    def _require_task(self) -> None:
        if self._task is None:
            raise RuntimeError("WebShopBackend: call reset(task) before step()")

    def step(self, action: str) -> StepResult:
        self._require_task()
        engine = self.engine
        if engine.done:
            # upstream would keep accepting searches after a purchase; the episode is over here
            return StepResult(observation=engine.observation(), score=engine.reward, done=True,
                              success=engine.reward == 1.0,
                              info={"valid": False, "ignored": "the purchase already ended this task",
                                    "page": "done", "raw_reward": engine.reward, "reward_info": engine.reward_info})
        if not isinstance(action, str):
            raise TypeError(f"actions are strings, got {type(action).__name__}")
        observation, reward, done, info = engine.step(action)
        info["raw_reward"] = reward
        return StepResult(observation=observation, score=float(reward), done=done,
                          success=bool(done and reward == 1.0), info=info)

    def task_description(self) -> str:
        """The instruction without upstream's "Instruction: " heading, as verl-agent and the reference take
        it from the observation for their prompts; upstream's own `instruction_text`, with the heading, is
        in reset's info["instruction_text"]."""
        self._require_task()
        return self.engine.instruction

    def admissible_actions(self) -> list[str]:
        """`search[<your query>]` on the search page, else `click[x]` for every clickable (as the reference)."""
        self._require_task()
        available = self.engine.available_actions()
        actions = [SEARCH_PLACEHOLDER] if available["has_search_bar"] else []
        actions += [f"click[{c}]" for c in available["clickables"] if c != "search"]
        return actions

    def action_grammar(self) -> ActionGrammar:
        """The two command shapes; what a click names is listed on the page itself."""
        return ActionGrammar(templates=(SEARCH_PLACEHOLDER, "click[<button, product id or option>]"))

    def expert_action(self) -> str | None:
        """Search the goal's query, page through results to the target, pick the goal options, buy.

        When the target is not among the (at most 50) results of the goal's query, search its title instead.
        """
        self._require_task()
        engine = self.engine
        if engine.done:
            return None
        goal = engine.goal
        target = goal["asin"]
        title_query = self.shop.catalog.by_asin[target]["Title"].lower().replace("\n", " ")
        if engine.page == "search":
            return f"search[{goal['query'] or title_query}]"
        if engine.page == "results":
            if target.lower() in engine.clickables():
                return f"click[{target.lower()}]"
            listed = [p["asin"] for p in engine.results]
            if target in listed:
                here = engine.page_num
                wanted = listed.index(target) // 10 + 1
                return "click[next >]" if wanted > here else "click[< prev]"
            return f"search[{title_query}]"
        if engine.page == "sub":
            return "click[< prev]"
        if engine.page == "item":
            if engine.asin != target:
                return "click[< prev]"
            clickables = engine.clickables()
            for name, value in self._goal_option_pairs(goal):
                # a value shared by two groups selects only the later group; skip what cannot be selected
                if engine.options.get(name) != value and clickables.get(value) == ("option", name):
                    return f"click[{value}]"
            return "click[buy now]"
        return None

    def _goal_option_pairs(self, goal: dict[str, Any]) -> list[tuple[str, str]]:
        """(group, value) the expert should select: the dict for synthetic goals; for human goals, each
        option string placed in the product group that lists it."""
        options = goal["goal_options"]
        if isinstance(options, dict):
            return list(options.items())
        product = self.shop.catalog.by_asin[goal["asin"]]
        pairs = []
        for value in options:
            for name, values in product["options"].items():
                if value in values:
                    pairs.append((name, value))
                    break
        return pairs

    def close(self) -> None:
        self._engine = None
        self._task = None

    # ------------------------------------------------------------------------------------- extras

    def catalog_info(self) -> dict[str, Any]:
        """Where the catalog came from and how big it is (for logs and reports)."""
        shop = self.shop
        return {"source": shop.catalog.source, "products": len(shop.catalog.products), "goals": len(shop.goals),
                "noun_matcher": shop.noun_method, "search_index_cached": shop.search_engine.loaded_from_cache}
