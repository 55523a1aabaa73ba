"""WebShop pages, observation strings and the action grammar, on a small hand-made catalog."""

from __future__ import annotations

import random

import pytest

pytest.importorskip("bm25s")
pytest.importorskip("rapidfuzz")

from skillrise_gym.backends.webshop.catalog import Catalog, load_products  # noqa: E402
from skillrise_gym.backends.webshop.engine import MAX_QUERY_CHARS, Shop, WebShopEngine, parse_action  # noqa: E402
from skillrise_gym.backends.webshop.goals import make_goals  # noqa: E402
from skillrise_gym.backends.webshop.search import SearchEngine  # noqa: E402


def raw(asin, name, query, category="fashion", path="Clothing, Shoes & Jewelry › Men › Shoes", options=None,
        pricing="$25.99", description="A comfortable shoe.", bullets=("Rubber sole", "Breathable")):
    return {
        "asin": asin, "name": name, "query": query, "category": category, "product_category": path,
        "full_description": description, "small_description": list(bullets), "pricing": pricing,
        "images": ["img.jpg"], "customization_options": options if options is not None else "",
        "brand": "dropped",
    }


def opts(**groups):
    return {name: [{"value": v, "image": None} for v in values] for name, values in groups.items()}


RAW = [
    raw("B00SHOE001", "Runner Pro Running Shoes", "running shoes",
        options=opts(Color=["Navy Blue", "Black/White"], Size=["8", "9", "10"])),
    raw("B00SHOE002", "Trail Running Shoes for Men", "running shoes", pricing="$30.00 - $40.00"),
    raw("B00SOCK003", "Cotton Socks", "socks", description="", bullets=["Soft"], pricing=""),
    raw("B00MUG0004", "Coffee Mug", "coffee mug", category="furniture", path="Home & Kitchen › Kitchen › Mugs",
        options=opts(Color=["large"], Size=["large", "small"])),  # 'large' in two groups: later one wins
] + [raw(f"B00FILL{i:03d}", f"Running Shoe Model {i}", "running shoes") for i in range(30)]
ATTRS = {
    "B00SHOE001": {"attributes": ["rubber sole", "non slip"], "instruction": "Find me running shoes with rubber sole",
                   "instruction_attributes": ["rubber sole"]},
    "B00SOCK003": {"attributes": []},
}


@pytest.fixture(scope="module")
def shop():
    rng = random.Random(233)
    products, prices = load_products(RAW, ATTRS, None, False, rng)
    catalog = Catalog(products=products, prices=prices, source="test", cache_key="test")
    goals = make_goals(products, prices, False, rng)
    return Shop(catalog, goals, SearchEngine(products), noun_matcher="fallback")


@pytest.fixture
def env(shop):
    engine = WebShopEngine(shop)
    index = next(i for i, g in enumerate(shop.goals) if g["goal_options"] == {"color": "navy blue", "size": "9"})
    engine.reset(index)
    return engine


def instr(env):
    return env.goal["instruction_text"]


# ------------------------------------------------------------------------------------------ loading


def test_loading_follows_upstream(shop):
    p = shop.catalog.by_asin["B00SHOE001"]
    assert p["options"] == {"color": ["navy blue", "black | white"], "size": ["8", "9", "10"]}
    assert p["Price"] == "$25.99" and p["pricing"] == [25.99] and shop.catalog.prices["B00SHOE001"] == 25.99
    assert "brand" not in p and p["Rating"] == "N.A." and p["Reviews"] == []
    assert shop.catalog.by_asin["B00SHOE002"]["Price"] == "$30.0 to $40.0"
    assert 30.0 <= shop.catalog.prices["B00SHOE002"] <= 40.0
    assert shop.catalog.by_asin["B00SOCK003"]["Price"] == "$100.0" and shop.catalog.prices["B00SOCK003"] == 100.0
    assert shop.catalog.by_asin["B00SOCK003"]["Attributes"] == []
    assert shop.catalog.by_asin["B00MUG0004"]["Attributes"] == ["DUMMY_ATTR"]


def test_synthetic_goals_one_per_option_combination(shop):
    assert len(shop.goals) == 6  # 2 colours x 3 sizes, only B00SHOE001 has an instruction
    texts = sorted(g["instruction_text"] for g in shop.goals)
    assert texts[0].startswith("Find me running shoes with rubber sole with color: black | white, and size: 10")
    # one ceiling per product: the larger of two of 30, 40, 50, 60 (the next four steps above $25.99)
    ceilings = {g["price_upper"] for g in shop.goals}
    assert len(ceilings) == 1 and ceilings <= {40.0, 50.0, 60.0}
    assert all(t.endswith(f", and price lower than {next(iter(ceilings)):.2f} dollars")
               for t in texts)


# ------------------------------------------------------------------------------------------ pages


def test_search_page(env):
    assert env.observation() == f"WebShop [SEP] Instruction: [SEP] {instr(env)} [SEP] Search"
    assert env.available_actions() == {"has_search_bar": True, "clickables": ["search"]}


def test_results_page_and_paging(env):
    obs, reward, done, info = env.step("search[Running Shoes]")
    assert (reward, done, info["valid"]) == (0.0, False, True)
    head = f"Instruction: [SEP] {instr(env)} [SEP] Back to Search [SEP] Page 1 (Total results: 33) [SEP] Next > [SEP] "
    assert obs.startswith(head)
    assert "< Prev" not in obs
    clickables = env.available_actions()["clickables"]
    assert clickables[:2] == ["back to search", "next >"] and len(clickables) == 12
    assert all(c.startswith("b00") for c in clickables[2:])
    first = env.results[0]
    assert f"[SEP] {first['asin']} [SEP] {first['Title']} [SEP] {first['Price']}" in obs
    obs, *_ = env.step("click[next >]")
    assert "Page 2 (Total results: 33) [SEP] < Prev [SEP] Next >" in obs
    assert env.available_actions()["clickables"][:3] == ["back to search", "< prev", "next >"]
    env.step("click[next >]"), env.step("click[next >]")
    obs, *_ = env.step("click[next >]")  # page 5: past the last page, 'Next >' is still offered
    assert obs.endswith("Page 5 (Total results: 33) [SEP] < Prev [SEP] Next >")
    obs, *_ = env.step("click[< prev]")
    assert "Page 4 (Total results: 33)" in obs


def test_item_page_options_and_sub_pages(env):
    env.step("search[runner pro]")
    obs, *_ = env.step("click[b00shoe001]")
    assert obs == (f"Instruction: [SEP] {instr(env)} [SEP] Back to Search [SEP] < Prev [SEP] color [SEP] navy blue "
                   "[SEP] black | white [SEP] size [SEP] 8 [SEP] 9 [SEP] 10 [SEP] Runner Pro Running Shoes [SEP] "
                   "Price: $25.99 [SEP] Rating: N.A. [SEP] Description [SEP] Features [SEP] Reviews [SEP] Buy Now")
    assert env.available_actions()["clickables"] == [
        "back to search", "< prev", "description", "features", "reviews", "buy now",
        "navy blue", "black | white", "8", "9", "10"]
    obs2, *_ = env.step("click[navy blue]")
    assert obs2 == obs and env.options == {"color": "navy blue"}  # selected options are not shown
    obs, *_ = env.step("click[description]")
    assert obs == f"Instruction: [SEP] {instr(env)} [SEP] Back to Search [SEP] < Prev [SEP] A comfortable shoe."
    assert env.available_actions()["clickables"] == ["back to search", "< prev"]
    env.step("click[< prev]")
    assert env.page == "item" and env.options == {"color": "navy blue"}  # options survive a sub-page
    obs, *_ = env.step("click[features]")
    assert obs.endswith("< Prev [SEP] Rubber sole [SEP] Breathable")
    env.step("click[< prev]")
    obs, *_ = env.step("click[reviews]")
    assert obs.endswith("[SEP] Back to Search [SEP] < Prev")
    env.step("click[< prev]")
    obs, *_ = env.step("click[< prev]")  # item -> results page it came from; options are cleared
    assert obs.startswith(f"Instruction: [SEP] {instr(env)} [SEP] Back to Search [SEP] Page 1")
    assert env.options == {} and env.asin is None


def test_empty_description_has_no_text_node(env):
    env.step("search[cotton socks]")
    env.step("click[b00sock003]")
    obs, *_ = env.step("click[description]")
    assert obs.endswith("[SEP] < Prev")


def test_shared_option_value_collapses_and_later_group_wins(env):
    env.step("search[coffee mug]")
    env.step("click[b00mug0004]")
    clickables = env.available_actions()["clickables"]
    assert clickables.count("large") == 1 and clickables[-2:] == ["large", "small"]
    env.step("click[large]")
    assert env.options == {"size": "large"}


def test_back_to_search_clears_the_session(env):
    env.step("search[running shoes]")
    env.step(f"click[{env.results[0]['asin'].lower()}]")
    obs, *_ = env.step("click[back to search]")
    assert obs == f"WebShop [SEP] Instruction: [SEP] {instr(env)} [SEP] Search"
    assert (env.keywords, env.page_num, env.asin, env.options, env.asins) == (None, None, None, {}, set())


def test_search_works_from_any_page(env):
    env.step("search[running shoes]")
    env.step(f"click[{env.results[0]['asin'].lower()}]")
    obs, _, _, info = env.step("search[coffee mug]")
    assert info["valid"] and env.page == "results" and "B00MUG0004" in obs


def test_buy_now_scores_and_shows_done_page(env):
    env.step("search[runner pro]")
    env.step("click[b00shoe001]")
    env.step("click[navy blue]")
    env.step("click[9]")
    obs, reward, done, info = env.step("click[buy now]")
    assert done and reward == 1.0 and info["reward_info"]["r_option"] == 1.0
    assert obs.startswith("Thank you for shopping with us! [SEP] Your code: [SEP] None [SEP] "
                          "(Paste it in your MTurk interface.) [SEP] Purchased [SEP] asin [SEP] B00SHOE001 [SEP] "
                          'options [SEP] {"color": "navy blue", "size": "9"} [SEP]')
    assert obs.endswith("Your score (min 0.0, max 1.0) [SEP] 1.0 [SEP] Reward Details [SEP] None")
    assert env.available_actions() == {"has_search_bar": False, "clickables": []}


def test_buy_without_options_gets_partial_reward(env):
    env.step("search[runner pro]")
    env.step("click[b00shoe001]")
    _, reward, done, info = env.step("click[buy now]")
    # 1 attribute + 0 of 2 options + price ok, over 1 + 2 + 1
    assert done and reward == pytest.approx(0.5) and info["reward_info"]["r_option"] == 0.0


# ------------------------------------------------------------------------------------------ grammar


@pytest.mark.parametrize("action", [
    "click[search]",  # the search button is never clickable
    "click[nothing here]",  # unknown clickable
    "click[buy now]",  # not on this page
    "search[]",  # empty argument: no regex match
    "search",  # no brackets
    "",  # empty
    "Search[shoes]",  # the action name is case-sensitive
    " search[shoes]",  # and not stripped
    "search[a\nb]",  # '.' does not cross newlines
    "look around",
])
def test_invalid_actions_are_no_ops(env, action):
    before = env.observation()
    obs, reward, done, info = env.step(action)
    assert (obs, reward, done, info["valid"]) == (before, 0.0, False, False)


def test_action_parser_is_greedy_and_prefix_anchored():
    assert parse_action("search[red shoes]") == ("search", "red shoes")
    assert parse_action("search[a] b]") == ("search", "a] b")
    assert parse_action("click[a][b]") == ("click[a]", "b")
    assert parse_action("search[shoes] please") == ("search", "shoes")
    assert parse_action("search[]") == ("search[]", None)


def test_click_argument_is_lowercased(env):
    env.step("search[running shoes]")
    obs, _, _, info = env.step("click[Next >]")
    assert info["valid"] and "Page 2" in obs


def test_blank_search_gives_an_empty_results_page(env):
    obs, _, _, info = env.step("search[ ]")
    assert info["valid"] and "Page 1 (Total results: 0) [SEP] Next >" in obs


def test_huge_query_is_truncated_and_still_searches(env):
    obs, _, _, info = env.step("search[" + "running shoes " * 5000 + "]")
    assert info["valid"] and info["query_truncated"] and len(" ".join(env.keywords)) == MAX_QUERY_CHARS
    assert "Total results: 33" in obs
    # thousands of distinct terms: capped like Lucene's clause limit, no crash
    words = " ".join(f"w{i}" for i in range(3000))
    obs, _, _, info = env.step(f"search[{words} running]")
    assert info["valid"] and "Page 1" in obs


def test_special_query_prefixes(env):
    obs, *_ = env.step("search[<c> furniture]")
    assert "Total results: 1" in obs and "B00MUG0004" in obs
    obs, *_ = env.step("search[<q> socks]")
    assert "Total results: 1" in obs and "B00SOCK003" in obs
    obs, *_ = env.step("search[<a> non slip]")
    assert "B00SHOE001" in obs
    obs, *_ = env.step("search[<r>]")
    assert "Total results: 34" in obs


# ------------------------------------------------------------------------------------------ empty text, instruction
def test_empty_bullet_points_keep_their_segment_as_upstream():
    """Upstream renders `<p> {{bullet}}</p>`; BeautifulSoup turns the whitespace-only node into " ", which
    strips to an empty segment: two separators with two spaces between them."""
    from skillrise_gym.backends.webshop import pages

    product = {"Description": "d", "BulletPoints": ["Soft", "", "   ", "\n", "Warm"]}
    assert pages.sub_page("i", product, "Features") == (
        "Instruction: [SEP] i [SEP] Back to Search [SEP] < Prev [SEP] Soft [SEP]  [SEP]  [SEP] Warm")
    # the bare-node rules: an empty value has no text node; blanks without a line break keep an empty
    # segment; whitespace with a line break is BeautifulSoup's "\n", which upstream drops; non-ASCII blanks stay
    assert pages.join(["a", "", "b"]) == "a [SEP] b"
    assert pages.join(["a", "  ", "b"]) == "a [SEP]  [SEP] b"
    assert pages.join(["a", " \n ", "b"]) == "a [SEP] b"
    assert pages.join(["a", "\xa0", "b"]) == "a [SEP]  [SEP] b"
    assert pages.join(["  a  ", "b\n"]) == "a [SEP] b"
    # an empty description is no text node at all (the template has no padding there)
    assert pages.sub_page("i", {**product, "Description": ""}, "Description").endswith("[SEP] < Prev")


def test_instruction_text_carries_upstreams_prefix(shop):
    engine = WebShopEngine(shop)
    engine.reset(0)
    assert engine.instruction_text == "Instruction: " + engine.goal["instruction_text"]
    # the observation shows the heading as its own segment; the task text (the reference's prompts take the
    # third segment) has none
    assert engine.observation().split(" [SEP] ")[1:3] == ["Instruction:", engine.instruction]
