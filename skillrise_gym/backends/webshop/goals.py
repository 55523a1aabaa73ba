"""Goals: synthetic (one per option combination) and human-instruction goals, shuffled and split like upstream."""

from __future__ import annotations

import itertools
import random
from collections import defaultdict
from typing import Any

#: upstream's price ceilings: 10, 20, ..., 990 dollars
PRICE_RANGE = [10.0 * i for i in range(1, 100)]
#: upstream split boundaries over the shuffled goal list (test 0-499, eval 500-1499, train 1500+)
SPLITS: dict[str, tuple[int, int | None]] = {"test": (0, 500), "eval": (500, 1500), "train": (1500, None)}
#: upstream's goal shuffle seed (`random.seed(233); random.shuffle(goals)`)
UPSTREAM_GOAL_SEED = 233


def price_ceiling(price: float, rng: random.Random) -> tuple[float, str]:
    """Upstream: the larger of two of the next four ceilings above the price; none (1e6) near the top."""
    candidates = [p for p in PRICE_RANGE if p > price][:4]
    if len(candidates) >= 2:
        _, upper = sorted(rng.sample(candidates, 2))
        return upper, f", and price lower than {upper:.2f} dollars"
    return 1000000, ""


def synthetic_goals(products: list[dict], prices: dict[str, float], rng: random.Random) -> list[dict[str, Any]]:
    """One goal per element of the Cartesian product of a product's option values (products with an instruction)."""
    goals: list[dict[str, Any]] = []
    counts: dict[str, int] = defaultdict(int)
    for product in products:
        if product.get("instruction_text") is None:
            continue
        attributes = product["instruction_attributes"]
        upper, price_text = price_ceiling(prices[product["asin"]], rng)
        options = product["options"]
        names = sorted(options)
        for combination in itertools.product(*(options[name] for name in names)):
            goal_options = dict(zip(names, combination))
            option_text = ", and ".join(f"{k}: {v}" for k, v in goal_options.items())
            option_text = " with " + option_text if option_text else ""
            goals.append({
                "asin": product["asin"],
                "category": product["category"],
                "query": product["query"],
                "name": product["Title"],
                "product_category": product["product_category"],
                "instruction_text": f"{product['instruction_text']}{option_text}{price_text}",
                "attributes": attributes,
                "price_upper": upper,
                "goal_options": goal_options,
            })
            for attribute in attributes:
                counts[attribute] += 1
    for goal in goals:
        goal["weight"] = sum(1.0 / counts[a] for a in goal["attributes"]) / len(goal["attributes"])
    return goals


def human_goals(products: list[dict], prices: dict[str, float], rng: random.Random) -> list[dict[str, Any]]:
    """One goal per human instruction with non-empty attributes; the price ceiling is drawn per instruction."""
    goals: list[dict[str, Any]] = []
    for item in products:
        for instruction in item.get("instructions", ()):
            attributes = instruction["instruction_attributes"]
            if len(attributes) == 0:
                continue
            upper, price_text = price_ceiling(prices[item["asin"]], rng)
            goals.append({
                "asin": item["asin"],
                "category": item["category"],
                "query": item["query"],
                "name": item["name"],
                "product_category": item["product_category"],
                "instruction_text": instruction["instruction"].strip(".") + price_text,
                "attributes": attributes,
                "price_upper": upper,
                "goal_options": instruction["instruction_options"],
                "weight": 1,
            })
    return goals


def make_goals(products: list[dict], prices: dict[str, float], human: bool, rng: random.Random,
               shuffle_seed: int = UPSTREAM_GOAL_SEED) -> list[dict[str, Any]]:
    """All goals in upstream order: built product by product, then shuffled with `random.Random(shuffle_seed)`,
    which draws the same permutation as upstream's `random.seed(233); random.shuffle(goals)`."""
    goals = human_goals(products, prices, rng) if human else synthetic_goals(products, prices, rng)
    random.Random(shuffle_seed).shuffle(goals)
    return goals


def split_range(split: str, n_goals: int) -> range:
    """Goal indices of a split, clipped to the number of goals."""
    start, stop = SPLITS[split]
    return range(min(start, n_goals), n_goals if stop is None else min(stop, n_goals))


def goal_difficulty(goal: dict[str, Any]) -> int:
    """Number of goal attributes + goal options: what a purchase must satisfy besides type and price."""
    return len(goal["attributes"]) + len(goal["goal_options"])
