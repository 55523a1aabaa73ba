"""Compare our pure-Python WebShop search (skillrise_gym/backends/webshop/search.py) with the real Lucene.

The oracle is benchmarks/parity/lucene_oracle/LuceneOracle.java run against the Anserini 0.14.3 fatjar shipped in
the pyserini 0.17.0 wheel (upstream WebShop's pinned pyserini; Lucene 8.11.0): Anserini's own
IndexCollection (upstream's flags) and SimpleSearcher.search(q, 50), which is what upstream's
`LuceneSearcher.search(query, k=50)` calls. Not part of the tests (needs Java 17 and the jar).

Get the jar (registries only) and build the oracle:

    pip download --no-deps pyserini==0.17.0 -d /tmp/pyserini_wheel
    mkdir -p /tmp/lucene /tmp/pyserini_unz && unzip -q -o /tmp/pyserini_wheel/pyserini-0.17.0-py3-none-any.whl \
        'pyserini/resources/jars/*' -d /tmp/pyserini_unz
    cp /tmp/pyserini_unz/pyserini/resources/jars/anserini-0.14.3-fatjar.jar /tmp/lucene/anserini-fatjar.jar
    javac -cp /tmp/lucene/anserini-fatjar.jar -d /tmp/lucene benchmarks/parity/lucene_oracle/LuceneOracle.java

Then: .venv/bin/python benchmarks/parity/webshop_lucene_compare.py [--oracle-dir /tmp/lucene] [--queries 200]

What it does: builds the default generated catalog and goals the way the backend does (ShopConfig defaults:
1000 products, catalog seed 0, goal seed 233), writes upstream's index documents (convert_product_file_format.py:
id = ASIN, contents = lower(Title + ' ' + Description + ' ' + BulletPoints[0] + ' ' + option text), which is
search.document_text), indexes them with the oracle, and compares

* rankings: for the first N distinct goal "query" strings, and for the instruction texts of the first N goals
  (lower-cased, as the text env lower-cases search arguments), our SearchEngine.search top 10 (as ASINs) vs
  Lucene's top 10 (identical order, overlap@10, identical top 50), plus the same with our ties broken by
  ASIN as Lucene does;
* analyzers: every distinct whitespace token of the documents and queries through our Analyzer and through
  DefaultEnglishAnalyzer (with and without stemming, to tell tokenizer from stemmer differences);
* whole documents: token streams and lengths per document.

Writes benchmarks/results/webshop_lucene_compare.json and prints a summary.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]  # the repo root (benchmarks/<kind>/<name>.py)
if str(ROOT) not in sys.path:  # run as a file
    sys.path.insert(0, str(ROOT))

from skillrise_gym.backends.webshop import search as our_search  # noqa: E402
from skillrise_gym.backends.webshop.catalog import load_catalog  # noqa: E402
from skillrise_gym.backends.webshop.goals import make_goals  # noqa: E402

SOURCE = ROOT / "benchmarks" / "parity" / "lucene_oracle" / "LuceneOracle.java"
RESULTS = ROOT / "benchmarks" / "results" / "webshop_lucene_compare.json"
#: strings whose Lucene analysis is reported (tokenizer and stemmer corner cases)
PROBES = ["us", "use", "easy use", "contact us", "assembly", "technology", "m.2", "h.265", "color:c", "1,000",
          "3.5", "don't", "u.s.", "a1b", "x_y", "men's", "it's", "USB-C", "wi-fi", "e.g.", "5'2", "café", "2x",
          "x2", "ab.cd", "a.b.c", "12.5mm"]
JAVA_OPTS = ["-Xmx2g", "-XX:+UseSerialGC", "-XX:ActiveProcessorCount=1", "-Dfile.encoding=UTF-8"]


class Oracle:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.jar = folder / "anserini-fatjar.jar"
        if not self.jar.is_file():
            sys.exit(f"{self.jar} is missing: see this script's docstring for how to get it")
        klass = folder / "LuceneOracle.class"
        if not klass.is_file() or klass.stat().st_mtime < SOURCE.stat().st_mtime:
            subprocess.run(["javac", "-cp", str(self.jar), "-d", str(folder), str(SOURCE)], check=True)

    def run(self, args: list[str], lines: list[str] | None = None) -> list[str]:
        text = "".join(line + "\n" for line in lines) if lines is not None else ""
        done = subprocess.run(["java", *JAVA_OPTS, "-cp", f"{self.folder}:{self.jar}", "LuceneOracle", *args],
                              input=text.encode("utf-8"), capture_output=True, check=False)
        if done.returncode != 0:
            sys.exit(f"LuceneOracle {args[0]} failed:\n{done.stderr.decode('utf-8', 'replace')[-3000:]}")
        out = done.stdout.decode("utf-8").split("\n")
        if out and out[-1] == "":
            out.pop()
        if lines is not None and len(out) != len(lines):
            sys.exit(f"LuceneOracle {args[0]}: {len(out)} output lines for {len(lines)} input lines")
        return out

    def analyze(self, texts: list[str], stem: bool = True) -> list[list[str]]:
        lines = [t.replace("\r", " ").replace("\n", " ") for t in texts]
        return [line.split("\t") if line else [] for line in self.run(["analyze" if stem else "tokenize"], lines)]


def our_tokens(text: str, stem: bool = True, analyzer: our_search.Analyzer | None = None) -> list[str]:
    """Our Analyzer; without stemming: its same tokenizer, possessive, lower-case and stopword steps."""
    if stem:
        return analyzer(text)
    tokens = []
    for token in our_search._TOKEN.findall(text):
        token = token.lower()
        if token.endswith(("'s", "’s")):
            token = token[:-2]
        if token and token not in our_search.LUCENE_STOPWORDS:
            tokens.append(token)
    return tokens


def difference_class(word: str, ours_plain: list[str], lucene_plain: list[str]) -> str:
    """'stemmer' when the unstemmed tokens agree, else 'tokenizer:<what the word holds>'."""
    if ours_plain == lucene_plain:
        return "stemmer"
    marks = sorted({c for c in word if not c.isalnum()})
    if any(ord(c) > 127 for c in word):
        return "tokenizer:non-ascii"
    if marks:
        return "tokenizer:" + "".join(marks)
    return "tokenizer:other"


def build_catalog(num_products: int, catalog_seed: int, goal_seed: int):
    """Catalog, prices and goals exactly as engine.Shop._build draws them (one RNG for prices and ceilings)."""
    rng = random.Random(goal_seed)
    catalog = load_catalog(None, num_products, catalog_seed, False, rng)
    goals = make_goals(catalog.products, catalog.prices, False, rng, shuffle_seed=goal_seed)
    return catalog, goals


def compare_rankings(name: str, queries: list[str], engine: our_search.SearchEngine, asins: list[str],
                     lucene_hits: list[dict], ours_q: list[list[str]], lucene_q: list[list[str]],
                     affected: set[str]) -> dict:
    """`affected`: terms that our analyzer and Lucene's produce differently for some word of the corpus."""
    asin_rank = {a: i for i, a in enumerate(sorted(asins))}
    identical10 = identical10_asin_ties = identical50 = identical50_asin_ties = same_set10 = 0
    distinct = len(set(queries))
    overlaps: list[float] = []
    examples = []
    errors = no_hits = 0
    by_cause: Counter = Counter()
    for query, hits, oq, lq in zip(queries, lucene_hits, ours_q, lucene_q):
        if "error" in hits:
            errors += 1
            continue
        lucene = [h[0] for h in hits["hits"]]
        ours = [asins[i] for i in engine.search(query)]
        # our scores, ties broken by ASIN (Lucene's tie-break) instead of document order
        scores = engine.scores(query)
        positive = np.flatnonzero(scores > 0)
        order = sorted(positive.tolist(), key=lambda i: (-float(scores[i]), asin_rank[asins[i]]))
        ours_asin_ties = [asins[i] for i in order[: our_search.SEARCH_RETURN_N]]
        # overlap@10 as a fraction of the lists' size (both empty = full agreement)
        size = min(10, max(len(ours), len(lucene)))
        overlaps.append(len(set(ours[:10]) & set(lucene[:10])) / size if size else 1.0)
        no_hits += not lucene and not ours
        identical10 += ours[:10] == lucene[:10]
        identical10_asin_ties += ours_asin_ties[:10] == lucene[:10]
        identical50 += ours == lucene
        identical50_asin_ties += ours_asin_ties == lucene
        same_set10 += set(ours[:10]) == set(lucene[:10])
        if ours[:10] != lucene[:10]:
            if ours_asin_ties[:10] == lucene[:10]:
                cause = "tie order only (our document-order tie-break vs Lucene's docid tie-break)"
            elif sorted(oq) != sorted(lq):
                cause = "analyzer: query terms differ"
            elif set(oq) & affected:
                cause = "analyzer: a query term is stemmed differently in some documents"
            else:
                cause = "scores (float rounding near-ties or other)"
            by_cause[cause] += 1
            if len(examples) < 15:
                examples.append({"query": query, "ours_terms": oq, "lucene_terms": lq, "cause": cause,
                                 "ours_top10": ours[:10], "ours_top10_asin_ties": ours_asin_ties[:10],
                                 "lucene_top10": [[h[0], h[1], h[2]] for h in hits["hits"][:10]],
                                 "our_scores_of_lucene_top10": [
                                     round(float(scores[asins.index(a)]), 6) for a in lucene[:10]]})
    n = len(overlaps)
    return {
        "name": name, "queries": len(queries), "distinct_queries": distinct, "lucene_errors": errors,
        "identical_top10_order": identical10,
        "identical_top10_order_if_our_ties_broken_by_asin": identical10_asin_ties,
        "identical_top10_set": same_set10, "identical_top50_order": identical50,
        "identical_top50_order_if_our_ties_broken_by_asin": identical50_asin_ties,
        "queries_without_hits_in_both": no_hits,
        "mean_overlap_at_10": round(sum(overlaps) / max(n, 1), 4),
        "overlap_histogram": {f"{k:.2f}": v for k, v in sorted(Counter(overlaps).items())},
        "mismatch_causes": dict(by_cause), "examples": examples,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--oracle-dir", type=Path, default=Path("/tmp/lucene"))
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--num-products", type=int, default=1000)
    parser.add_argument("--catalog-seed", type=int, default=0)
    parser.add_argument("--goal-seed", type=int, default=233)
    parser.add_argument("--out", type=Path, default=RESULTS,
                        help="where the JSON goes (default: benchmarks/results/webshop_lucene_compare.json)")
    parser.add_argument("--human-instructions", type=Path, default=ROOT.parent / "shared" / "data" / "webshop"
                        / "human_goals.json", help="a JSON list of instruction strings (upstream's 12,087 human "
                        "instructions where the shared data has them); skipped when missing")
    args = parser.parse_args()
    started = time.time()
    oracle = Oracle(args.oracle_dir)
    lucene_version = oracle.run(["version"])[0]

    catalog, goals = build_catalog(args.num_products, args.catalog_seed, args.goal_seed)
    products = catalog.products
    asins = [p["asin"] for p in products]
    docs = [our_search.document_text(p) for p in products]
    engine = our_search.SearchEngine(products, cache_folder=None)

    # queries: the first N goals' "query" fields (else instruction texts), and their instruction texts
    field_queries = [(g.get("query") or g["instruction_text"]).lower() for g in goals[: args.queries]]
    instruction_queries = [g["instruction_text"].lower() for g in goals[: args.queries]]

    with tempfile.TemporaryDirectory(prefix="webshop-lucene-", dir=args.oracle_dir) as tmp:
        tmp = Path(tmp)
        (tmp / "docs").mkdir()
        with open(tmp / "docs" / "documents.jsonl", "w", encoding="utf-8") as handle:
            for asin, text in zip(asins, docs):
                handle.write(json.dumps({"id": asin, "contents": text}) + "\n")
        oracle.run(["index", str(tmp / "docs"), str(tmp / "index")])
        all_queries = field_queries + instruction_queries
        raw_hits = [json.loads(line) for line in oracle.run(["search", str(tmp / "index"), "50"], all_queries)]

    # ---- analyzers: distinct whitespace tokens of documents and queries
    frequency: Counter = Counter()
    for text in docs + all_queries:
        frequency.update(text.split())
    words = sorted(frequency, key=lambda w: (-frequency[w], w))
    lucene_stem = oracle.analyze(words)
    lucene_plain = oracle.analyze(words, stem=False)
    analyzer = engine.analyzer
    differing = []
    classes: Counter = Counter()
    classes_weighted: Counter = Counter()
    for word, ls, lp in zip(words, lucene_stem, lucene_plain):
        ours = our_tokens(word, analyzer=analyzer)
        if ours != ls:
            op = our_tokens(word, stem=False)
            cls = difference_class(word, op, lp)
            classes[cls] += 1
            classes_weighted[cls] += frequency[word]
            differing.append({"word": word, "count": frequency[word], "ours": ours, "lucene": ls,
                              "ours_unstemmed": op, "lucene_unstemmed": lp, "class": cls})
    stem_pairs: Counter = Counter()
    for d in differing:
        if d["class"] == "stemmer":
            for o, lu in zip(d["ours"], d["lucene"]):
                if o != lu:
                    stem_pairs[(o, lu)] += d["count"]

    affected = {t for d in differing for t in d["ours"] + d["lucene"]}
    probe_ours = [our_tokens(t, analyzer=analyzer) for t in PROBES]
    probe_lucene = oracle.analyze(PROBES)
    probe_lucene_plain = oracle.analyze(PROBES, stem=False)

    # ---- whole documents and queries
    lucene_docs = oracle.analyze(docs)
    lucene_queries = oracle.analyze(all_queries)

    # ---- scoring alone: our SearchEngine fed Lucene's own tokens (the Analyzer class swapped in this process
    # only), so that any remaining difference comes from BM25 scoring / ordering, not from analysis
    lucene_analysis = dict(zip(docs, lucene_docs)) | dict(zip(all_queries, lucene_queries))

    class LuceneTokens:
        def __call__(self, text: str) -> list[str]:
            return lucene_analysis[text]

    saved = our_search.Analyzer
    our_search.Analyzer = LuceneTokens
    try:
        engine_lucene_tokens = our_search.SearchEngine(products, cache_folder=None)
    finally:
        our_search.Analyzer = saved
    doc_token_diff = sum(analyzer(d) != lu for d, lu in zip(docs, lucene_docs))
    human: dict[str, Any] = {"path": str(args.human_instructions), "present": args.human_instructions.is_file()}
    if human["present"]:
        texts = [str(t).replace("\n", " ").lower() for t in json.loads(args.human_instructions.read_text())]
        differ = [{"text": t, "ours": analyzer(t), "lucene": lu} for t, lu in zip(texts, oracle.analyze(texts))
                  if analyzer(t) != lu]
        human.update(instructions=len(texts), token_stream_differs=len(differ), differing=differ[:20])
    doc_length_diff = sum(len(analyzer(d)) != len(lu) for d, lu in zip(docs, lucene_docs))
    ours_queries = [analyzer(q) for q in all_queries]
    n_field = len(field_queries)

    results = {
        "oracle": {"lucene": lucene_version, "anserini": "0.14.3 (pyserini 0.17.0 wheel fatjar)",
                   "analyzer": "DefaultEnglishAnalyzer.newDefaultInstance()",
                   "search": "SimpleSearcher.search(q, 50): BM25(k1=0.9, b=0.4), sort (score, docid)"},
        "catalog": {"source": catalog.source, "products": len(products), "goals": len(goals),
                    "empty_documents": sum(not d.strip() for d in docs)},
        "rankings": [
            compare_rankings("goal query field", field_queries, engine, asins, raw_hits[:n_field],
                             ours_queries[:n_field], lucene_queries[:n_field], affected),
            compare_rankings("goal instruction text", instruction_queries, engine, asins, raw_hits[n_field:],
                             ours_queries[n_field:], lucene_queries[n_field:], affected),
        ],
        "rankings_with_lucene_tokens": [
            compare_rankings("goal query field, our scoring on Lucene's tokens", field_queries, engine_lucene_tokens,
                             asins, raw_hits[:n_field], lucene_queries[:n_field], lucene_queries[:n_field], set()),
            compare_rankings("goal instruction text, our scoring on Lucene's tokens", instruction_queries,
                             engine_lucene_tokens, asins, raw_hits[n_field:], lucene_queries[n_field:],
                             lucene_queries[n_field:], set()),
        ],
        "analyzer": {
            "distinct_words": len(words), "word_occurrences": sum(frequency.values()),
            "differing_words": len(differing),
            "differing_occurrences": sum(d["count"] for d in differing),
            "classes": dict(classes.most_common()), "classes_by_occurrences": dict(classes_weighted.most_common()),
            "stem_pairs_top": [{"ours": o, "lucene": lu, "occurrences": c} for (o, lu), c in stem_pairs.most_common(40)],
            "top_differing": differing[:50],
        },
        "probes": [{"text": t, "lucene": lu, "lucene_unstemmed": lp, "ours": o, "same": o == lu}
                   for t, lu, lp, o in zip(PROBES, probe_lucene, probe_lucene_plain, probe_ours)],
        "documents": {"token_stream_differs": doc_token_diff, "length_differs": doc_length_diff},
        "human_instructions": human,
        "queries": {"token_stream_differs": sum(o != lu for o, lu in zip(ours_queries, lucene_queries)),
                    "of": len(all_queries)},
        "seconds": round(time.time() - started, 1),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")

    print(f"Lucene {lucene_version}; catalog {catalog.source}: {len(products)} products, {len(goals)} goals")
    for r in results["rankings"] + results["rankings_with_lucene_tokens"]:
        print(f"[{r['name']}] {r['queries']} queries ({r['distinct_queries']} distinct): identical top-10 order {r['identical_top10_order']}"
              f" (with ASIN tie-break {r['identical_top10_order_if_our_ties_broken_by_asin']}),"
              f" same top-10 set {r['identical_top10_set']}, identical top-50 {r['identical_top50_order']},"
              f" (with ASIN tie-break {r['identical_top50_order_if_our_ties_broken_by_asin']}),"
              f" overlap@10 {r['mean_overlap_at_10']}, no hits {r['queries_without_hits_in_both']}; mismatches: {r['mismatch_causes']}")
    a = results["analyzer"]
    print(f"analyzer: {a['differing_words']} of {a['distinct_words']} distinct words differ"
          f" ({a['differing_occurrences']} of {a['word_occurrences']} occurrences); classes {a['classes']}")
    for d in differing[:50]:
        print(f"  {d['count']:6d}  {d['word']!r}: ours {d['ours']} lucene {d['lucene']} [{d['class']}]")
    print("probes (text: lucene | ours):")
    for p in results["probes"]:
        print(f"  {p['text']!r}: {p['lucene']} | {p['ours']}{'' if p['same'] else '   DIFFERENT'}")
    print(f"documents whose token stream differs: {doc_token_diff}/{len(docs)} (length differs: {doc_length_diff})")
    if human["present"]:
        print(f"human instructions whose token stream differs: {human['token_stream_differs']}/{human['instructions']}")
        for d in human["differing"][:5]:
            print(f"  {d['text'][:80]!r}: ours {d['ours']} lucene {d['lucene']}")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
