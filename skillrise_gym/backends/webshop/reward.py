"""WebShop's purchase reward (upstream `engine/goal.py::get_reward`), component by component, quirks included.

reward = (matched attributes + matched options + price ok) / (|attributes| + |options| + 1) * r_type

Quirks reproduced by default (``quirks=True``), because they move upstream scores:

* `normalize_color` returns the first COLOR_SET word *contained* in the option: a substring test on a str
  ('standard' -> 'tan', 'washable' -> 'ash', 'navy blue' -> 'blue'), an element-equality test on a tuple.
* synthetic goals pass their options as (name, value) tuples; thefuzz str()-s them, so the option *name*
  becomes a token ('blue' vs ('color', 'navy blue') scores 100, the subset rule of token_set_ratio).
* thefuzz rounds the ratio to an int before the `> 85` test.

With ``quirks=False`` colours are matched as whole words and goal options are compared by value only
(a documented fix, never the default).
"""

from __future__ import annotations

import functools
import re
from typing import Any, Callable, Iterable

COLOR_SET = [
    "alabaster", "apricot", "aqua", "ash", "asphalt", "azure", "banana", "beige", "black", "blue", "blush",
    "bordeaux", "bronze", "brown", "burgundy", "camel", "camo", "caramel", "champagne", "charcoal", "cheetah",
    "chestnut", "chocolate", "christmas", "coffee", "cognac", "copper", "coral", "cranberry", "cream", "crystal",
    "dark", "denim", "eggplant", "elephant", "espresso", "fuchsia", "gold", "granite", "grape", "graphite", "grass",
    "gray", "green", "grey", "heather", "indigo", "ivory", "ivy", "khaki", "lavender", "lemon", "leopard", "light",
    "lilac", "lime", "magenta", "maroon", "mauve", "merlot", "midnight", "mint", "mocha", "multicolor", "mushroom",
    "mustard", "natural", "navy", "nude", "olive", "orange", "peach", "pewter", "pink", "plum", "purple", "rainbow",
    "red", "rose", "royal", "rust", "sand", "sapphire", "seashell", "silver", "skull", "slate", "steel", "stone",
    "stonewash", "sunflower", "tan", "taupe", "teal", "tiger", "turquoise", "violet", "walnut", "wheat", "white",
    "wine", "yellow",
]
NOUN_TAGS = ("PNOUN", "NOUN", "PROPN")  # 'PNOUN' is listed upstream but spaCy never produces it
MATCH_THRESHOLD = 85

_ASCII_DAMMIT = {i: None for i in range(128, 256)}


# ---------------------------------------------------------------------------------------------- fuzzy


def _thefuzz_process(value: Any) -> str:
    """thefuzz's default `full_process(s, force_ascii=True)`: str(), drop chars 128-255, then rapidfuzz's
    default_process (non-alphanumerics -> space, lower-case, strip)."""
    from rapidfuzz.utils import default_process

    return default_process(str(value).translate(_ASCII_DAMMIT))


def token_set_ratio(a: Any, b: Any) -> int:
    """`thefuzz.fuzz.token_set_ratio(a, b)` with thefuzz's defaults, on rapidfuzz: processed, then int(round())."""
    from rapidfuzz import fuzz

    return int(round(fuzz.token_set_ratio(_thefuzz_process(a), _thefuzz_process(b))))


# ---------------------------------------------------------------------------------------------- colours


def normalize_color(option: Any) -> Any:
    """Upstream: the first COLOR_SET entry `in` the option (substring for str, equality for tuple), else as is."""
    for color in COLOR_SET:
        if color in option:
            return color
    return option


def normalize_color_words(option: Any) -> Any:
    """The fixed variant: whole-word colour match on the option's value (a tuple counts by its value)."""
    value = option[1] if isinstance(option, tuple) else option
    words = set(re.findall(r"[a-z0-9]+", str(value).lower()))
    for color in COLOR_SET:
        if color in words:
            return color
    return value


# ---------------------------------------------------------------------------------------------- nouns

#: fallback: function words and the title adjectives spaCy's en_core_web_sm tags neither NOUN nor PROPN on
#: Title-Case product titles ("High Quality", "Premium", "Low" stay: spaCy tags them PROPN there)
_FALLBACK_STOP = frozenset("""
a an the and or but nor for with without in on at by of to from into onto over under up out off as
is are be been was were this that these those it its your our my his her their we you they he she i me
new best great good big small large extra super ultra mini pro plus top
any each every more most much many some few other another such very so too not only just
x xl xxl s m l one two three four five six seven eight nine ten per
""".split())


def fallback_nouns(title: str) -> list[str]:
    """Offline stand-in for spaCy's NOUN/PROPN tokens: lower-cased alphabetic words (hyphen parts split, so
    "T-Shirt" gives "t" and "shirt", as spaCy's tokens) that are not function words or common title
    adjectives. Where it differs from spaCy's en_core_web_sm it is context: participles and verbs such as
    "Wrapped", "Upgraded", "Eat", brand names spaCy reads as verbs. How often the two agree on the generated
    catalog (noun lists, and the type reward r_type of random purchases) is measured by
    `webshop_noun_agreement.py` (benchmarks/; figures in docs/webshop.md, "Reward")."""
    return [w for w in re.findall(r"[a-z]+", title.lower()) if w not in _FALLBACK_STOP]


@functools.lru_cache(maxsize=4)
def _spacy_model() -> Any | None:
    """The first English spaCy pipeline available offline, or None: en_core_web_sm first, as upstream's
    goal.py loads it at HEAD (64fa2a5; its setup.sh and older commits name en_core_web_lg), then lg, md."""
    try:
        import spacy
    except ImportError:
        return None
    for name in ("en_core_web_sm", "en_core_web_lg", "en_core_web_md"):
        try:
            return spacy.load(name)
        except OSError:
            continue
    return None


def spacy_available() -> bool:
    return _spacy_model() is not None


def make_noun_extractor(mode: str = "auto") -> tuple[Callable[[str], list[str]], str]:
    """(title -> noun tokens, the name of the method used). mode: 'spacy', 'fallback' or 'auto'."""
    if mode not in ("spacy", "fallback", "auto"):
        raise ValueError(f"noun_matcher must be 'spacy', 'fallback' or 'auto', got {mode!r}")
    if mode in ("spacy", "auto"):
        nlp = _spacy_model()
        if nlp is not None:
            @functools.lru_cache(maxsize=65536)
            def spacy_nouns(title: str) -> list[str]:
                return [t.text.lower() for t in nlp(title) if t.pos_ in NOUN_TAGS]

            return spacy_nouns, f"spacy:{nlp.meta.get('name', '?')}"
        if mode == "spacy":
            from skillrise_gym.backends.base import MissingDependencyError

            raise MissingDependencyError(
                "noun_matcher='spacy' needs spaCy with an English pipeline (en_core_web_sm/lg/md), which is not "
                "installed; install one (e.g. pip install <en_core_web_sm wheel>) or use noun_matcher='fallback'"
            )
    return fallback_nouns, "fallback"


# ---------------------------------------------------------------------------------------------- components


def type_reward(purchased: dict, goal: dict, nouns: Callable[[str], list[str]]) -> dict[str, Any]:
    """r_type from query match, shared category-path levels (>= 2) and the title-noun overlap."""
    query_match = purchased["query"] == goal["query"]
    purchased_path = {x.strip() for x in purchased["product_category"].split("›")}
    goal_path = {x.strip() for x in goal["product_category"].split("›")}
    category_match = len(purchased_path & goal_path) >= 2
    purchased_nouns = nouns(purchased["name"])
    desired_nouns = nouns(goal["name"])
    if len(desired_nouns) == 0:
        title_score = 0.2
    else:
        title_score = len(set(purchased_nouns) & set(desired_nouns)) / len(desired_nouns)
    r_type = 1.0
    if not (query_match or category_match or title_score > 0.2):
        r_type = 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return {"r_type": r_type, "query_match": query_match, "category_match": category_match,
            "title_score": title_score}


def attribute_reward(purchased: dict, goal: dict) -> tuple[float, int]:
    """A goal attribute matches a product attribute (ratio > 85) or is a substring of title/bullets/description."""
    matches = 0
    for g_attr in goal["attributes"]:
        if any(token_set_ratio(p_attr, g_attr) > MATCH_THRESHOLD for p_attr in purchased["Attributes"]):
            matches += 1
        elif (g_attr in purchased["Title"].lower() or g_attr in " ".join(purchased["BulletPoints"]).lower()
              or g_attr in purchased["Description"].lower()):
            matches += 1
    return matches / len(goal["attributes"]), matches


def goal_option_list(goal: dict) -> list[Any]:
    """Synthetic goals: (name, value) tuples from the dict; human goals: the list of strings."""
    options = goal["goal_options"]
    return list(options.items()) if isinstance(options, dict) else list(options)


def option_reward(purchased_options: Iterable[Any], goal_options: Iterable[Any], quirks: bool = True) -> tuple[float | None, int]:
    """Each goal option matches if any purchased option scores > 85 after colour normalisation."""
    normalize = normalize_color if quirks else normalize_color_words
    purchased = [normalize(o) for o in purchased_options]
    goals = [normalize(o) for o in goal_options]
    matches = 0
    for g_option in goals:
        if any(token_set_ratio(p_option, g_option) > MATCH_THRESHOLD for p_option in purchased):
            matches += 1
    return (matches / len(goals) if goals else None), matches


def get_reward(purchased: dict, goal: dict, price: float, options: dict[str, str],
               nouns: Callable[[str], list[str]], quirks: bool = True) -> tuple[float, dict[str, Any]]:
    """(reward, verbose info) exactly like upstream's `get_reward(..., verbose=True)`, plus match counts."""
    type_info = type_reward(purchased, goal, nouns)
    r_price = (price <= goal["price_upper"]) if goal["price_upper"] > 0 else None
    r_att, num_attr = attribute_reward(purchased, goal)
    r_option, num_option = option_reward(list(options.values()), goal_option_list(goal), quirks=quirks)
    denominator = len(goal["attributes"]) + len(goal["goal_options"]) + 1
    reward = (num_attr + num_option + r_price) / denominator * type_info["r_type"]
    info: dict[str, Any] = {
        "r_type": type_info["r_type"],
        "r_att": r_att,
        "w_att": len(goal["attributes"]) / denominator,
        "query_match": type_info["query_match"],
        "category_match": type_info["category_match"],
        "title_score": type_info["title_score"],
    }
    if r_option is not None:
        info["r_option"] = r_option
        info["w_option"] = len(goal["goal_options"]) / denominator
    if r_price is not None:
        info["r_price"] = r_price
        info["w_price"] = 1 / denominator
    info["num_attr_matches"] = num_attr
    info["num_option_matches"] = num_option
    return reward, info
