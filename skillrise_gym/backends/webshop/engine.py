"""The WebShop text environment: upstream's `WebAgentTextEnv` + `SimServer` session logic, without HTML.

`Shop` is the read-only part (catalog, goals, search index, noun extractor), shared by every engine in a
process that asks for the same configuration. `WebShopEngine` is one browsing session on a shop.
"""

from __future__ import annotations

import gc
import random
import re
import threading
from dataclasses import dataclass
from typing import Any

from skillrise_gym.backends.webshop import pages
from skillrise_gym.backends.webshop.catalog import Catalog, load_catalog
from skillrise_gym.backends.webshop.goals import UPSTREAM_GOAL_SEED, make_goals
from skillrise_gym.backends.webshop.reward import get_reward, make_noun_extractor
from skillrise_gym.backends.webshop.search import (
    INDEX_VERSION,
    PRODUCT_WINDOW,
    SEARCH_RETURN_N,
    SearchEngine,
    search_source_hash,
)
from skillrise_gym.paths import cache_dir

ACTION_PATTERN = re.compile(r"(.+)\[(.+)\]")
#: the search page's heading before the instruction (upstream's `instruction_text` starts with it)
INSTRUCTION_PREFIX = "Instruction: "
#: queries longer than this are cut before analysis (upstream had no limit; Lucene failed past 1024 terms)
MAX_QUERY_CHARS = 10_000


def parse_action(action: str) -> tuple[str, str | None]:
    """Upstream's parser: `re.match(r'(.+)\\[(.+)\\]')`, greedy, anchored at the start only."""
    match = ACTION_PATTERN.match(action)
    if match is None:
        return action, None
    return match.group(1), match.group(2)


@dataclass(frozen=True)
class ShopConfig:
    data_dir: str | None
    num_products: int
    catalog_seed: int
    human_goals: bool
    goal_seed: int
    noun_matcher: str
    cache_index: bool


class Shop:
    """Catalog + shuffled goals + search index + noun extractor: the read-only part of the environment."""

    def __init__(self, catalog: Catalog, goals: list[dict], search_engine: SearchEngine,
                 noun_matcher: str = "auto", seed: int = UPSTREAM_GOAL_SEED) -> None:
        self.catalog = catalog
        self.goals = goals
        self.search_engine = search_engine
        self.nouns, self.noun_method = make_noun_extractor(noun_matcher)
        self._random = random.Random(seed)  # for the '<r>' random-results query

    @classmethod
    def build(cls, config: ShopConfig) -> "Shop":
        """Load (or generate) the catalog, draw prices and goals in upstream's order, index it."""
        # building allocates millions of long-lived objects; the cyclic GC would rescan them over and
        # over (a large share of a big catalog's build time), and they hold no cycles worth collecting
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            shop = cls._build(config)
        finally:
            if was_enabled:
                gc.enable()
        shop.config = config
        return shop

    config: ShopConfig | None = None  # set by `build`

    def __reduce__(self) -> Any:
        """A shop pickles (and deep-copies) as its config: unpickled, it is the process-wide shop for that
        config (`get_shop`, built from the disk cache if this process has none), since engines only read it;
        its search index is large, and rebuilding or reloading it per copy would be waste."""
        if self.config is None:
            raise TypeError("a WebShop Shop made without Shop.build(config) has no config to pickle it by")
        return (get_shop, (self.config,))

    @classmethod
    def _build(cls, config: ShopConfig) -> "Shop":
        # one RNG for the load-time price draws and the goal price ceilings, in upstream's order
        rng = random.Random(config.goal_seed)
        catalog = load_catalog(config.data_dir, config.num_products, config.catalog_seed, config.human_goals, rng)
        goals = make_goals(catalog.products, catalog.prices, config.human_goals, rng, shuffle_seed=config.goal_seed)
        index_folder = (cache_dir("webshop", "index", f"{catalog.cache_key}-v{INDEX_VERSION}-{search_source_hash()}")
                        if config.cache_index else None)
        return cls(catalog, goals, SearchEngine(catalog.products, cache_folder=index_folder),
                   noun_matcher=config.noun_matcher, seed=config.goal_seed)

    def top_products(self, keywords: list[str]) -> list[dict]:
        """Upstream `get_top_n_product_from_keywords`, special '<r>', '<a>', '<c>', '<q>' prefixes included."""
        products = self.catalog.products
        head = keywords[0] if keywords else ""
        if head == "<r>":
            return self._random.sample(products, k=min(SEARCH_RETURN_N, len(products)))
        if head == "<a>":
            asins = self.catalog.attribute_to_asins.get(" ".join(keywords[1:]).strip(), set())
            return [p for p in products if p["asin"] in asins]
        if head == "<c>":
            category = keywords[1].strip() if len(keywords) > 1 else ""
            return [p for p in products if p["category"] == category]
        if head == "<q>":
            query = " ".join(keywords[1:]).strip()
            return [p for p in products if p["query"] == query]
        hits = self.search_engine.search(" ".join(keywords), k=SEARCH_RETURN_N)
        return [products[i] for i in hits]


_SHOPS: dict[ShopConfig, Shop] = {}
_SHOPS_LOCK = threading.Lock()


def get_shop(config: ShopConfig) -> Shop:
    """The process-wide shop for `config` (built once; engines only read it)."""
    with _SHOPS_LOCK:
        shop = _SHOPS.get(config)
        if shop is None:
            shop = _SHOPS[config] = Shop.build(config)
        return shop


def clear_shops() -> None:
    """Forget every cached shop (their catalogs and indexes stay on disk); for long-running processes."""
    with _SHOPS_LOCK:
        _SHOPS.clear()


class WebShopEngine:
    """One session: pages, clicks, searches and the reward at Buy Now, following upstream's text env."""

    def __init__(self, shop: Shop, reward_quirks: bool = True) -> None:
        self.shop = shop
        self.reward_quirks = reward_quirks
        self.goal: dict[str, Any] | None = None
        self.goal_index: int | None = None
        self._reset_session()

    # -------------------------------------------------------------------------------------- session

    def _reset_session(self) -> None:
        """Upstream's 'back to search': keywords, page, asin, options, clicked asins and counters cleared."""
        self.page = "search"
        self.keywords: list[str] | None = None
        self.page_num: int | None = None
        self.asin: str | None = None
        self.asins: set[str] = set()
        self.options: dict[str, str] = {}
        self.sub_page: str | None = None
        self.action_counts: dict[str, int] = {}
        self.results: list[dict] = []
        self.done = False
        self.reward = 0.0
        self.reward_info: dict[str, Any] | None = None

    def reset(self, goal_index: int) -> str:
        self.goal_index = goal_index
        self.goal = self.shop.goals[goal_index]
        self._reset_session()
        return self.observation()

    @property
    def instruction(self) -> str:
        """The goal's instruction, as the observation's third segment shows it (what verl-agent's and the
        reference's prompts call the task: `obs.split(" [SEP] ")[2]`)."""
        assert self.goal is not None, "reset() first"
        return self.goal["instruction_text"]

    @property
    def instruction_text(self) -> str:
        """Upstream's `WebAgentTextEnv.instruction_text`: the search page's instruction heading as text,
        `<h4>Instruction: <br>{{ instruction_text }}</h4>`, so with its "Instruction: " prefix."""
        return INSTRUCTION_PREFIX + self.instruction

    def _count(self, key: str) -> None:
        self.action_counts[key] = self.action_counts.get(key, 0) + 1

    # -------------------------------------------------------------------------------------- view

    def page_products(self) -> list[dict]:
        start = (self.page_num - 1) * PRODUCT_WINDOW
        return self.results[start:start + PRODUCT_WINDOW]

    def observation(self) -> str:
        if self.page == "search":
            return pages.search_page(self.instruction)
        if self.page == "results":
            return pages.results_page(self.instruction, self.page_products(), self.page_num, len(self.results))
        product = self.shop.catalog.by_asin[self.asin]
        if self.page == "item":
            return pages.item_page(self.instruction, product)
        if self.page == "sub":
            return pages.sub_page(self.instruction, product, self.sub_page)
        return pages.done_page(self.asin, self.options, self.reward)

    def clickables(self) -> dict[str, tuple]:
        if self.page == "results":
            return pages.clickables("results", self.page_products(), self.page_num)
        if self.page in ("item", "sub"):
            return pages.clickables(self.page, product=self.shop.catalog.by_asin[self.asin])
        return pages.clickables(self.page)

    def available_actions(self) -> dict[str, Any]:
        """Upstream `get_available_actions`: whether the page has a search bar, and the clickable texts."""
        return {"has_search_bar": self.page == "search", "clickables": list(self.clickables())}

    # -------------------------------------------------------------------------------------- actions

    def _show_results(self, keywords: list[str], page_num: int) -> None:
        # upstream searches again on every results render (so '<r>' re-draws its random products)
        self.results = self.shop.top_products(keywords)
        self.keywords, self.page_num = keywords, page_num
        self._count("search")
        self.asin, self.options, self.page = None, {}, "results"

    def step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        """(observation, reward, done, info). Invalid actions change nothing (reward 0, info['valid'] False)."""
        info: dict[str, Any] = {"valid": False}
        name, arg = parse_action(action)
        if arg is not None:
            arg = arg.lower()
        clickables = self.clickables()
        reward = 0.0
        if name == "search" and arg is not None and arg != "":
            if len(arg) > MAX_QUERY_CHARS:
                arg = arg[:MAX_QUERY_CHARS]
                info["query_truncated"] = True
            self._show_results(arg.split(" "), 1)
            info["valid"] = True
        elif name == "click" and arg in clickables and arg != "search":
            reward = self._click(arg, clickables[arg])
            info["valid"] = True
        if self.done:
            info["reward_info"] = self.reward_info
        info["page"] = self.page
        return self.observation(), reward, self.done, info

    def _click(self, text: str, clickable: tuple) -> float:
        if text == pages.END_BUTTON.lower():
            return self._buy()
        if text == pages.BACK_TO_SEARCH.lower():
            self._reset_session()
        elif text == pages.NEXT_PAGE.lower() and self.page == "results":
            self._show_results(self.keywords, self.page_num + 1)
        elif text == pages.PREV_PAGE.lower() and self.page == "results":
            self._show_results(self.keywords, self.page_num - 1)
        elif text == pages.PREV_PAGE.lower() and self.page == "sub":
            self.page = "item"
        elif text == pages.PREV_PAGE.lower() and self.page == "item":
            self._show_results(self.keywords, self.page_num)
        elif text in [s.lower() for s in pages.SUB_PAGES]:
            self.sub_page = next(s for s in pages.SUB_PAGES if s.lower() == text)
            self._count(self.sub_page)
            self.page = "sub"
        else:
            if clickable[0] == "product":
                self.asin = text.upper()
                self.asins.add(self.asin)
                self._count("asin")
            elif clickable[0] == "option":
                self.options[clickable[1].lower()] = text
                self._count("options")
            self.page = "item"
        return 0.0

    def _buy(self) -> float:
        product = self.shop.catalog.by_asin[self.asin]
        self._count("purchase")
        price = self.shop.catalog.prices[self.asin]
        self.reward, self.reward_info = get_reward(product, self.goal, price, self.options, self.shop.nouns,
                                                   quirks=self.reward_quirks)
        self.done = True
        self.page = "done"
        return self.reward


__all__ = ["MAX_QUERY_CHARS", "Shop", "ShopConfig", "UPSTREAM_GOAL_SEED", "WebShopEngine", "clear_shops", "get_shop",
           "parse_action"]
