"""WebShop reward: every component and every upstream quirk, on hand-made products and goals."""

from __future__ import annotations

import random

import pytest

pytest.importorskip("rapidfuzz")

from rapidfuzz import fuzz  # noqa: E402

from skillrise_gym.backends.webshop import reward as R  # noqa: E402
from skillrise_gym.backends.webshop.goals import PRICE_RANGE, price_ceiling  # noqa: E402


def product(**overrides):
    base = {
        "asin": "B000000001",
        "name": "Lumina Shea Butter Body Butter for Dry Skin",
        "Title": "Lumina Shea Butter Body Butter for Dry Skin",
        "query": "body butter",
        "product_category": "Beauty & Personal Care › Skin Care › Body › Moisturizers › Body Butters",
        "Attributes": ["shea butter", "dry skin", "cruelty free"],
        "BulletPoints": ["RICH: whipped texture", "Travel friendly jar"],
        "Description": "A paraben free body butter made with natural ingredients.",
    }
    base.update(overrides)
    return base


def goal(**overrides):
    base = {
        "asin": "B000000001",
        "query": "body butter",
        "name": "Lumina Shea Butter Body Butter for Dry Skin",
        "product_category": "Beauty & Personal Care › Skin Care › Body › Moisturizers › Body Butters",
        "attributes": ["shea butter", "cruelty free"],
        "goal_options": {"scent": "lavender", "size": "8 ounce"},
        "price_upper": 30.0,
    }
    base.update(overrides)
    return base


# ------------------------------------------------------------------------------------------ colours


@pytest.mark.parametrize(
    "value, expected",
    [
        ("", ""),
        ("black forest", "black"),
        ("violet lavender", "lavender"),  # COLOR_SET order decides, not position in the string
        ("steelivy fuchsia", "fuchsia"),
        ("123alabaster", "alabaster"),
        ("webshop", "webshop"),
        ("navy blue", "blue"),  # substring: 'blue' comes before 'navy' in COLOR_SET
        ("standard", "tan"),  # quirk: substring match inside a word
        ("washable", "ash"),
        ("blueberry", "blue"),
    ],
)
def test_normalize_color_substring_quirks(value, expected):
    assert R.normalize_color(value) == expected


def test_normalize_color_on_tuples_uses_element_equality():
    assert R.normalize_color(("color", "navy blue")) == ("color", "navy blue")
    assert R.normalize_color(("color", "blue")) == "blue"
    assert R.normalize_color(("style", "standard")) == ("style", "standard")


def test_color_set_is_upstreams_list():
    assert len(R.COLOR_SET) == 102 and R.COLOR_SET[:3] == ["alabaster", "apricot", "aqua"]
    assert R.COLOR_SET[-1] == "yellow" and R.COLOR_SET.index("blue") < R.COLOR_SET.index("navy")


def test_fixed_color_normalisation_matches_whole_words_only():
    assert R.normalize_color_words("standard") == "standard"
    assert R.normalize_color_words("navy blue") == "blue"
    assert R.normalize_color_words(("color", "navy blue")) == "blue"
    assert R.normalize_color_words(("style", "washable")) == "washable"


# ------------------------------------------------------------------------------------------ fuzzy


def test_token_set_ratio_processes_like_thefuzz():
    # lower-case, non-alphanumerics to spaces, tuples str()-ed: the option name becomes a token
    assert R.token_set_ratio("Navy-Blue!", "navy blue") == 100
    assert R.token_set_ratio("blue", ("color", "navy blue")) == 100
    assert R.token_set_ratio("tan", ("style", "standard")) < 86
    assert R.token_set_ratio("", "blue") == 0
    # characters 128-255 are dropped before processing (thefuzz's force_ascii)
    assert R.token_set_ratio("caf\u00e9", "caf") == 100


def test_token_set_ratio_rounds_before_the_threshold():
    a, b = "a" * 47, "a" * 47 + "b" * 16
    raw = fuzz.token_set_ratio(a, b)
    assert 85 < raw < 85.5
    assert R.token_set_ratio(a, b) == 85  # so upstream's `> 85` test fails
    c, d = "abcdef", "abcdefgh"
    assert 85.5 < fuzz.token_set_ratio(c, d) < 86 and R.token_set_ratio(c, d) == 86


# ------------------------------------------------------------------------------------------ type


def test_type_reward_full_match():
    info = R.type_reward(product(), goal(), R.fallback_nouns)
    # the same title scores 6/7, not 1: 'butter' appears twice in the goal's noun list (the denominator)
    assert info == {"r_type": 1.0, "query_match": True, "category_match": True, "title_score": 6 / 7}


def test_type_reward_category_needs_two_shared_levels():
    other = product(query="lotion", product_category="Beauty & Personal Care › Hair Care")
    assert R.type_reward(other, goal(), R.fallback_nouns)["category_match"] is False
    other = product(query="lotion", product_category="Beauty & Personal Care › Skin Care › Face")
    assert R.type_reward(other, goal(), R.fallback_nouns)["category_match"] is True


def test_type_reward_title_score_thresholds():
    nouns = lambda title: title.split()  # noqa: E731 - every word a noun, to control the score exactly
    g = goal(name="a b c d e f g h i j", query="q", product_category="X › Y")
    unrelated = dict(query="other", product_category="Z › W")
    # no query/category match, title_score 0.2 (not > 0.2): 0.5
    assert R.type_reward(product(name="a b", **unrelated), g, nouns)["r_type"] == 0.5
    # title_score 0.3 > 0.2 counts as a match: 1.0
    assert R.type_reward(product(name="a b c", **unrelated), g, nouns)["r_type"] == 1.0
    # title_score below 0.1 overrides even a query match: 0.1 ... and exactly 0 gives 0.0
    g2 = goal(name=" ".join("abcdefghijkl"), query="q")
    assert R.type_reward(product(name="a", query="q"), g2, nouns)["r_type"] == 0.1
    assert R.type_reward(product(name="zz", query="q"), g2, nouns)["r_type"] == 0.0


def test_type_reward_no_goal_nouns_gives_title_score_point_two():
    info = R.type_reward(product(name="Xyz"), goal(name="the and of"), R.fallback_nouns)
    assert info["title_score"] == 0.2 and info["r_type"] == 1.0  # query matches


def test_type_reward_denominator_counts_duplicate_nouns():
    nouns = lambda title: title.split()  # noqa: E731
    info = R.type_reward(product(name="shoe"), goal(name="shoe shoe box"), nouns)
    assert info["title_score"] == pytest.approx(1 / 3)


def test_fallback_nouns_drop_function_words_numbers_and_title_adjectives():
    # en_core_web_sm 3.8 tags New, Premium, Pack, T, Shirt, Men PROPN and Cotton NOUN here; the fallback keeps
    # all but "new" (a title adjective it always drops)
    assert R.fallback_nouns("The New Premium 2-Pack T-Shirt for Men, 100% Cotton") == [
        "premium", "pack", "t", "shirt", "men", "cotton"]
    # spaCy: every word PROPN in this Title-Case title, "High" and "Quality" included
    assert R.fallback_nouns("High Quality Low Profile Wireless Mouse") == [
        "high", "quality", "low", "profile", "wireless", "mouse"]


def test_spacy_noun_path_when_a_model_is_installed():
    if not R.spacy_available():
        pytest.skip("no English spaCy pipeline installed (en_core_web_sm/lg/md)")
    nouns, method = R.make_noun_extractor("spacy")
    assert method.startswith("spacy:")
    assert "butter" in nouns("Lumina shea butter body butter for dry skin")


def test_noun_matcher_modes():
    nouns, method = R.make_noun_extractor("fallback")
    assert method == "fallback" and nouns is R.fallback_nouns
    with pytest.raises(ValueError):
        R.make_noun_extractor("nltk")
    if not R.spacy_available():
        from skillrise_gym.backends.base import MissingDependencyError

        with pytest.raises(MissingDependencyError):
            R.make_noun_extractor("spacy")
        assert R.make_noun_extractor("auto")[1] == "fallback"


# ------------------------------------------------------------------------------------------ attributes


def test_attribute_reward_fuzzy_and_text_fallbacks():
    g = goal(attributes=["shea butter", "paraben free", "travel friendly", "whipped texture", "vegan"])
    r_att, n = R.attribute_reward(product(), g)
    # shea butter: attribute; paraben free: description; travel friendly: bullets; whipped texture:
    # bullets (case-insensitive); vegan: nowhere
    assert n == 4 and r_att == pytest.approx(0.8)


def test_attribute_reward_subset_tokens_score_100():
    r_att, n = R.attribute_reward(product(Attributes=["butter"]), goal(attributes=["shea butter"]))
    assert n == 1  # {'butter'} is a subset of {'shea', 'butter'}: token_set_ratio 100


def test_attribute_reward_dummy_attr_matches_nothing():
    p = product(Attributes=["DUMMY_ATTR"], Description="", BulletPoints=[""], Title="x")
    assert R.attribute_reward(p, goal(attributes=["cruelty free"])) == (0.0, 0)


# ------------------------------------------------------------------------------------------ options


def test_option_reward_tuple_quirk_lets_the_name_match():
    # purchased 'navy blue' -> 'blue'; goal ('color', 'navy blue') stays a tuple: tokens {color, navy, blue}
    assert R.option_reward(["navy blue"], [("color", "navy blue")]) == (1.0, 1)
    # the option name alone is a subset too: a purchased value literally named 'color' matches
    assert R.option_reward(["color"], [("color", "dark navy")]) == (1.0, 1)
    # ...but a tuple holding an exact COLOR_SET word collapses to that word first
    assert R.normalize_color(("color", "red")) == "red"
    assert R.option_reward(["color"], [("color", "red")]) == (0.0, 0)


def test_option_reward_substring_quirk_fails_the_right_option():
    # purchased 'standard' normalises to 'tan', which is not a token of ('style', 'standard')
    assert R.option_reward(["standard"], [("style", "standard")]) == (0.0, 0)
    # the fixed matcher compares by value
    assert R.option_reward(["standard"], [("style", "standard")], quirks=False) == (1.0, 1)


def test_option_reward_one_purchase_can_satisfy_several_goal_options():
    assert R.option_reward(["large"], [("size", "large"), ("fit", "large")]) == (1.0, 2)


def test_option_reward_human_string_goals_and_no_options():
    # 'light grey' -> 'grey' ('grey' precedes 'light' in COLOR_SET), human goal options are plain strings
    assert R.option_reward(["light grey", "x-large"], ["grey", "x-large"]) == (1.0, 2)
    assert R.option_reward(["light grey"], ["grey", "x-large"]) == (0.5, 1)
    assert R.option_reward(["red"], []) == (None, 0)


# ------------------------------------------------------------------------------------------ price


def test_price_ceiling_draws_from_the_next_four_steps():
    rng = random.Random(0)
    for price in (0.5, 9.99, 25.0, 101.0, 955.0):
        upper, text = price_ceiling(price, rng)
        candidates = [p for p in PRICE_RANGE if p > price][:4]
        assert upper in candidates[1:] and upper > price
        assert text == f", and price lower than {upper:.2f} dollars"


def test_price_ceiling_absent_near_the_top():
    assert price_ceiling(985.0, random.Random(0)) == (1000000, "")
    assert price_ceiling(2000.0, random.Random(0)) == (1000000, "")


# ------------------------------------------------------------------------------------------ total


def test_get_reward_perfect_purchase():
    reward, info = R.get_reward(product(), goal(), 25.0, {"scent": "lavender", "size": "8 ounce"}, R.fallback_nouns)
    assert reward == 1.0
    assert info["r_att"] == 1.0 and info["r_option"] == 1.0 and info["r_price"] is True
    assert info["w_att"] == 2 / 5 and info["w_option"] == 2 / 5 and info["w_price"] == 1 / 5


def test_get_reward_formula_with_misses_and_type_factor():
    g = goal(attributes=["shea butter", "vegan"], price_upper=20.0)
    reward, info = R.get_reward(product(), g, 25.0, {"scent": "lavender"}, R.fallback_nouns)
    # 1 attribute + 1 option + price False, over 2 + 2 + 1, times r_type 1.0
    assert reward == pytest.approx(2 / 5) and info["r_price"] is False
    other = product(name="Rubber Duck", query="toy", product_category="Toys › Bath")
    reward, info = R.get_reward(other, goal(), 25.0, {}, R.fallback_nouns)
    assert info["r_type"] == 0.0 and reward == 0.0


def test_token_set_ratio_equals_thefuzz_when_installed():
    """thefuzz is not a dependency; where it is installed, compare on quirky inputs (tuples, non-ASCII)."""
    thefuzz = pytest.importorskip("thefuzz.fuzz")
    values = ["navy blue", ("color", "navy blue"), "Navy-Blue!", "caf\u00e9 au lait", "", "100% cotton",
              ("size", "x-large"), "x-large", "standard", "tan", "1/2 inch", "gr\u00f6\u00dfe", ("color", "\u00ff blue")]
    for a in values:
        for b in values:
            assert R.token_set_ratio(a, b) == thefuzz.token_set_ratio(a, b), (a, b)
