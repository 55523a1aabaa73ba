"""WebShop search: the Lucene-like analyzer, the indexed document text and BM25 ranking (k1=0.9, b=0.4)."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("bm25s")

from skillrise_gym.backends.webshop.search import (  # noqa: E402
    LUCENE_STOPWORDS,
    Analyzer,
    SearchEngine,
    document_text,
)


def doc(title, description="", bullets=("",), options=None):
    return {"Title": title, "Description": description, "BulletPoints": list(bullets), "options": options or {}}


def test_analyzer_like_anserini_default():
    analyze = Analyzer()
    assert len(LUCENE_STOPWORDS) == 33
    # stopwords dropped, lower-cased, possessive removed, Porter-stemmed
    assert analyze("The Women's Running Shoes and Socks") == ["women", "run", "shoe", "sock"]
    # decimals and inner apostrophes stay in one token; hyphens and slashes split
    assert analyze("3.5 oz don't wi-fi black/white") == ["3.5", "oz", "don't", "wi", "fi", "black", "white"]
    assert analyze("") == [] and analyze("the of and") == []


# Lucene 8.11's tokens (Anserini 0.14.3's DefaultEnglishAnalyzer, run from the pyserini 0.17.0 jar with
# benchmarks/parity/lucene_oracle/LuceneOracle.java) for each input
LUCENE_TOKENS = {
    "us": ["us"], "use": ["us"], "easy use": ["easi", "us"], "contact us": ["contact", "us"],
    "assembly": ["assembl"], "technology": ["technolog"], "m.2": ["m", "2"], "h.265": ["h", "265"],
    "color:c": ["color:c"], "1,000": ["1,000"], "3.5": ["3.5"], "don't": ["don't"], "u.s.": ["u."],
    "a1b": ["a1b"], "x_y": ["x_y"], "men's": ["men"], "it's": [], "usb-c": ["usb", "c"], "wi-fi": ["wi", "fi"],
    "e.g.": ["e.g"], "5'2": ["5'2"], "café": ["café"], "2x": ["2x"], "x2": ["x2"], "ab.cd": ["ab.cd"],
    "a.b.c": ["a.b.c"], "12.5mm": ["12.5mm"],
    # from upstream's human instructions: ideographs are one token each, a superscript digit breaks a word
    "1.8米 capacity": ["1.8", "米", "capac"], "财48 - wine": ["财", "48", "wine"], "easy to use.⁵": ["easi", "us"],
}


@pytest.mark.parametrize("text", sorted(LUCENE_TOKENS))
def test_analyzer_gives_lucenes_tokens(text):
    assert Analyzer()(text) == LUCENE_TOKENS[text]


def test_porter_stemmer_is_lucenes_reference_version():
    """Martin Porter's own implementation, as Lucene's PorterStemmer: the paper's examples, plus its three
    departures (short words untouched, "bli" -> "ble", "logi" -> "log")."""
    from skillrise_gym.backends.webshop.porter import stem

    cases = {
        "caresses": "caress", "ponies": "poni", "ties": "ti", "cats": "cat", "feed": "feed", "agreed": "agre",
        "plastered": "plaster", "bled": "bled", "motoring": "motor", "sing": "sing", "conflated": "conflat",
        "troubled": "troubl", "sized": "size", "hopping": "hop", "falling": "fall", "hissing": "hiss",
        "fizzed": "fizz", "filing": "file", "happy": "happi", "sky": "sky", "relational": "relat",
        "conditional": "condit", "rational": "ration", "digitizer": "digit", "radicalli": "radic",
        "vietnamization": "vietnam", "operator": "oper", "hopefulness": "hope", "sensibiliti": "sensibl",
        "triplicate": "triplic", "formative": "form", "electrical": "electr", "goodness": "good",
        "allowance": "allow", "adjustable": "adjust", "replacement": "replac", "adoption": "adopt",
        "homologous": "homolog", "effective": "effect", "bowdlerize": "bowdler", "cease": "ceas",
        "controll": "control", "roll": "roll",
        # the departures from the 1980 paper that Lucene keeps (Snowball's porter: "u", "assembli", "technologi")
        "us": "us", "is": "is", "assembly": "assembl", "incredibly": "incred", "technology": "technolog",
    }
    assert {word: stem(word) for word in cases} == cases


def test_document_text_is_upstreams_index_content():
    product = doc("Red Mug", "Big mug.", ["Dishwasher safe", "second bullet is not indexed"],
                  {"color": ["red", "blue"], "size": ["12 oz"]})
    assert document_text(product) == "red mug big mug. dishwasher safe color: red, blue, and size: 12 oz"
    assert document_text(doc("A", bullets=())) == "a   "  # no bullets: tolerated (upstream would fail)


def test_ranking_prefers_rarer_terms_and_more_matches():
    products = [
        doc("blue running shoes"),  # 0: matches both terms
        doc("red running shorts"),  # 1: 'running' only
        doc("blue mug"),  # 2: 'blue' only
        doc("blue plate"),  # 3
        doc("blue bowl"),  # 4
        doc("garden hose"),  # 5: nothing
    ]
    engine = SearchEngine(products)
    hits = engine.search("running blue")
    assert hits[0] == 0
    # 'running' (2 docs) is rarer than 'blue' (4 docs): the running-only doc outranks the blue-only ones
    assert hits[1] == 1
    assert set(hits) == {0, 1, 2, 3, 4}  # only documents matching at least one term


def test_ties_break_by_asin_and_top_k_is_respected():
    """Lucene's SimpleSearcher sorts by raw score, then docid (upstream's ASIN) ascending; the catalog's order
    plays no part. Here the catalog lists the ASINs in descending order."""
    products = [{**doc("identical widget"), "asin": f"B{79 - i:09d}"} for i in range(80)]
    engine = SearchEngine(products)
    assert engine.search("widget") == list(range(79, 29, -1))  # B000000000 first
    assert engine.search("widget", k=5) == [79, 78, 77, 76, 75]
    # without ASINs (unit-test documents), ties keep the documents' order
    assert SearchEngine([doc("identical widget") for _ in range(8)]).search("widget", k=3) == [0, 1, 2]


def test_ties_at_four_decimals_keep_lucenes_raw_order():
    """pyserini reports scores rounded to 4 decimals but never re-sorts by them (Anserini's
    ScoreTiesAdjusterReranker only rewrites the reported scores): two documents whose scores round to the same
    4 decimals keep their raw order, even when the better one has the larger ASIN."""
    fillers = [f"w{a}{b}" for a in "abcdefghijklmnopqrstuvwxyz" for b in "abcdefghijklmnopqrstuvwxyz"]
    products = [doc(" ".join(["widget"] * tf + fillers[n:2 * n])) for tf in range(1, 5) for n in range(40)]
    raw = SearchEngine(products).scores("widget")
    # ASINs in ascending score order: every better document has a larger ASIN
    ranks = {int(i): r for r, i in enumerate(sorted(range(len(products)), key=lambda i: (float(raw[i]), i)))}
    products = [{**p, "asin": f"B{ranks[i]:09d}"} for i, p in enumerate(products)]
    engine = SearchEngine(products)
    scores = engine.scores("widget")
    hits = engine.search("widget", k=len(products))
    assert [float(scores[i]) for i in hits] == sorted((float(v) for v in scores), reverse=True)
    near = [(a, b) for a, b in zip(hits, hits[1:]) if scores[a] != scores[b] and round(float(scores[a]), 4)
            == round(float(scores[b]), 4)]
    assert near, "the corpus must hold near-ties for this test to mean anything"
    assert all(products[a]["asin"] > products[b]["asin"] for a, b in near)  # raw order, not (rounded, ASIN)


def test_no_match_and_empty_queries_return_nothing():
    engine = SearchEngine([doc("blue mug"), doc("red cup")])
    assert engine.search("zebra") == []
    assert engine.search("") == [] and engine.search("the and") == []


def test_scores_follow_lucene_bm25():
    # two docs; query 'apple' appears once in a 2-token doc and twice in a 4-token doc
    products = [doc("apple pie"), doc("apple apple tart crumble")]
    engine = SearchEngine(products)
    scores = engine.scores("apple")
    n, df, k1, b = 2, 2, 0.9, 0.4
    idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
    avgdl = (2 + 4) / 2

    def bm25(tf, dl):
        return idf * tf / (tf + k1 * (1 - b + b * dl / avgdl))

    ratio = scores[0] / scores[1]
    assert ratio == pytest.approx(bm25(1, 2) / bm25(2, 4), rel=1e-5)  # bm25s may scale by (k1 + 1)


def test_repeated_query_terms_count_twice():
    products = [doc("blue shoes"), doc("blue blue blue blue mug shoes shoes")]
    engine = SearchEngine(products)
    once, twice = engine.scores("shoes blue"), engine.scores("shoes shoes blue")
    assert twice[0] > once[0]


def test_index_cache_round_trip(tmp_path):
    products = [doc("blue running shoes"), doc("red mug"), doc("green tea")]
    first = SearchEngine(products, cache_folder=tmp_path / "idx")
    second = SearchEngine(products, cache_folder=tmp_path / "idx")
    assert not first.loaded_from_cache and second.loaded_from_cache
    assert second.search("red mug") == first.search("red mug") == [1]


def test_generated_catalog_queries_find_their_products():
    """On the generated 1k catalog, a product's own query finds it in the top 50 most of the time."""
    from skillrise_gym.backends.webshop.backend import WebShopBackend

    shop = WebShopBackend(noun_matcher="fallback").shop
    products = shop.catalog.products[:200]
    found = sum(p["asin"] in {shop.catalog.products[i]["asin"] for i in shop.search_engine.search(p["query"])}
                for p in products)
    assert found / len(products) > 0.8
    # and its exact title finds it first
    for p in products[:50]:
        assert shop.catalog.products[shop.search_engine.search(p["Title"].lower())[0]]["Title"] == p["Title"]


def test_lucene_length_quantization():
    from skillrise_gym.backends.webshop.search import lucene_length

    # exact below 24 tokens, then four significant bits above 24 (Lucene's SmallFloat.intToByte4)
    assert [lucene_length(n) for n in (0, 1, 23, 24, 39, 40, 41, 47, 48, 100, 1000)] == [
        0, 1, 23, 24, 39, 40, 40, 46, 48, 96, 984]


def test_long_documents_of_nearly_equal_length_tie_like_lucene():
    filler = " ".join(f"w{i}" for i in range(38))
    products = [doc(f"{filler} target x"), doc(f"{filler} target")]  # 40 and 39 tokens
    scores = SearchEngine(products).scores("target")
    assert scores[0] < scores[1]
    products = [doc(f"{filler} target x y"), doc(f"{filler} target x")]  # 41 and 40 tokens: both stored as 40
    scores = SearchEngine(products).scores("target")
    assert scores[0] == scores[1]
    assert SearchEngine(products).search("target") == [0, 1]


def test_documents_with_no_indexable_words_are_never_hits():
    engine = SearchEngine([doc("the and of"), doc("blue mug")])
    assert engine.search("blue") == [1] and engine.search("the") == []
