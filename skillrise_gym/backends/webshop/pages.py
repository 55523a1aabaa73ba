"""Text observations of WebShop's pages, as upstream's text mode renders them, and each page's clickables.

Upstream renders HTML and keeps the visible text nodes, each stripped, joined by ' [SEP] '. Here the
same node sequence is built directly, see the spec, section 5, with upstream's rules for empty text (its
HTML parser, BeautifulSoup's html.parser, turns a text node of ASCII whitespace into "\n" when it holds a
line break and into " " otherwise; upstream then drops "\n" nodes and strips the rest):

- an empty value makes no text node at all (nothing shown: an empty title, description or option name);
- a value of blanks without a line break, and any value the template pads, shows as an empty segment:
  Features renders each bullet point as `<p> {{bullet}}</p>`, so an empty bullet point reads
  `... [SEP]  [SEP] ...`;
- a value of whitespace with a line break is dropped.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

SEP = " [SEP] "
BACK_TO_SEARCH = "Back to Search"
NEXT_PAGE = "Next >"
PREV_PAGE = "< Prev"
END_BUTTON = "Buy Now"
SUB_PAGES = ("Description", "Features", "Reviews")


#: what BeautifulSoup counts as whitespace when it collapses a whitespace-only text node
_ASCII_SPACES = "\x20\x0a\x09\x0c\x0d"


def _segment(node: Any) -> str | None:
    """A text node as upstream's text mode shows it: None where it shows nothing."""
    text = str(node)
    if text == "":
        return None  # an empty value renders no text node
    if not text.strip(_ASCII_SPACES):
        text = "\n" if "\n" in text else " "
    if text == "\n":
        return None
    return text.strip()


def join(nodes: Sequence[Any]) -> str:
    """The text nodes of a page as upstream shows them (`_segment`), joined with ' [SEP] '."""
    return SEP.join(s for s in map(_segment, nodes) if s is not None)


def search_page(instruction: str) -> str:
    return join(["WebShop", "Instruction:", instruction, "Search"])


def results_page(instruction: str, products: Sequence[dict], page: int, total: int) -> str:
    nodes: list[Any] = ["Instruction:", instruction, BACK_TO_SEARCH, f"Page {page} (Total results: {total})"]
    if page > 1:
        nodes.append(PREV_PAGE)
    nodes.append(NEXT_PAGE)
    for product in products:
        nodes += [product["asin"].upper(), product["Title"], product["Price"]]
    return join(nodes)


def item_page(instruction: str, product: dict) -> str:
    nodes: list[Any] = ["Instruction:", instruction, BACK_TO_SEARCH, PREV_PAGE]
    for name, values in product["options"].items():
        nodes += [name, *values]
    nodes += [product["Title"], f"Price: {product['Price']}", f"Rating: {product['Rating']}", *SUB_PAGES, END_BUTTON]
    return join(nodes)


def sub_page(instruction: str, product: dict, which: str) -> str:
    nodes: list[Any] = ["Instruction:", instruction, BACK_TO_SEARCH, PREV_PAGE]
    if which == "Description":
        nodes.append(product["Description"])
    elif which == "Features":
        nodes += [f" {bullet}" for bullet in product["BulletPoints"]]  # the template's `<p> {{bullet}}</p>`
    # Reviews: upstream never loads the review file, so the page is empty
    return join(nodes)


def _tojson(value: Any) -> str:
    """Flask's `tojson` filter: sorted keys, ASCII, and <, >, &, ' escaped as \\u sequences."""
    text = json.dumps(value, sort_keys=True)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026").replace("'", "\\u0027")


def done_page(asin: str, options: dict[str, str], reward: float) -> str:
    """The 'Thank you' page; its hidden details are text nodes too (upstream passes no goal, so most are None)."""
    nodes = [
        "Thank you for shopping with us!", "Your code:", "None", "(Paste it in your MTurk interface.)",
        "Purchased", "asin", asin, "options", _tojson(options), "attrs", "None", "category", "None",
        "query", "None", "product category", "None",
        "Target", "asin", "options", "attrs", "price upper", "instuction text", "category", "product category",
        "query", "Goal", "None", "Reward",
        "Your score (min 0.0, max 1.0)", repr(float(reward)), "Reward Details", "None",
    ]
    return join(nodes)


# ---------------------------------------------------------------------------------------------- clickables


def clickables(page: str, products: Sequence[dict] = (), page_num: int = 1, product: dict | None = None) -> dict[str, tuple]:
    """Clickable text (lower-cased) -> what it is, in page order, like upstream's `text_to_clickable`.

    Values: ('button',), ('product', ASIN) or ('option', group). A value shared by two option groups keeps
    one key and the later group wins, as upstream's dict does.
    """
    out: dict[str, tuple] = {}
    if page == "search":
        out["search"] = ("button",)
    elif page == "results":
        out[BACK_TO_SEARCH.lower()] = ("button",)
        if page_num > 1:
            out[PREV_PAGE.lower()] = ("button",)
        out[NEXT_PAGE.lower()] = ("button",)
        for p in products:
            out[p["asin"].lower()] = ("product", p["asin"])
    elif page == "item":
        assert product is not None
        for text in (BACK_TO_SEARCH, PREV_PAGE, *SUB_PAGES, END_BUTTON):
            out[text.lower()] = ("button",)
        for name, values in product["options"].items():
            for value in values:
                out[value] = ("option", name)
    elif page == "sub":
        out[BACK_TO_SEARCH.lower()] = ("button",)
        out[PREV_PAGE.lower()] = ("button",)
    return out
