"""BM25 product search standing in for upstream's pyserini/Lucene index (no JVM needed).

Same documents as upstream's index (its `convert_product_file_format.py`): lower(Title + ' ' + Description +
' ' + BulletPoints[0] + ' ' + option text), option text = ', and '.join(f"{name}: {', '.join(values)}").
Same analysis chain as Anserini's `DefaultEnglishAnalyzer` (pyserini 0.17 = Anserini 0.14.3 = Lucene 8.11):
StandardTokenizer, EnglishPossessiveFilter, LowerCaseFilter, Lucene's 33 English stopwords, PorterStemFilter.

- Tokenizer: Lucene's StandardTokenizer follows the Unicode word-break rules (UAX#29). Here: runs of word
  characters joined by '.', "'" or '’' between two letters or two digits, by ':' or '·' between two letters,
  by ',' or ';' between two digits ("3.5", "don't", "e.g", "color:c", "1,000" stay whole; "m.2" and
  "h.265" split, a letter and a digit being different classes across a '.'; "usb-c" splits on the hyphen).
- Stemmer: `porter.py`, Lucene's PorterStemmer (Martin Porter's reference version: "us" stays "us",
  "assembly" -> "assembl", "technology" -> "technolog").
- Scoring: BM25 k1=0.9, b=0.4 (pyserini's defaults) with Lucene's lossy document-length norms (below).
- Order: Lucene's raw float score, ties by docid (the ASIN) ascending, as SimpleSearcher's
  BREAK_SCORE_TIES_BY_DOCID sort; its later rounding of scores to 4 decimals (ScoreTiesAdjusterReranker)
  only changes the reported scores, never the order. Top 50 documents that match at least one query term.

Like Lucene (BM25Similarity since Lucene 7), document lengths are stored in one lossy byte
(`SmallFloat.intToByte4`: exact below 24 tokens, then 4 significant bits) and scores use the decoded
length against the exact average length.

Han ideographs and Hiragana are one token per character, as in Lucene; digits Unicode files as No
(superscripts, fractions) break words, as in UAX#29.

Measured against Anserini 0.14.3 itself (`webshop_lucene_compare.py`, benchmarks/, which needs the jar of the
pyserini 0.17.0 wheel and a JDK; not part of the tests): on the default generated catalog, the top 50 of
200 goal instructions and of 200 goal queries are identical, order included, and every document's tokens
are Lucene's. What still differs (1 of upstream's 12,087 human instructions): emoji and other
Extended_Pictographic symbols ("®", a token of its own in Lucene, dropped here), Katakana, Hebrew and
combining marks at word edges, Lucene's split of tokens longer than 255 characters, and float32 rounding in
the last bit of a score (an exact tie in one engine can be a near-tie in the other).
"""

from __future__ import annotations

import functools
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from skillrise_gym.backends.webshop import porter

#: Lucene's EnglishAnalyzer.ENGLISH_STOP_WORDS_SET
LUCENE_STOPWORDS = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their then there these "
    "they this to was will with".split()
)
SEARCH_RETURN_N = 50
PRODUCT_WINDOW = 10
#: Lucene's default BooleanQuery clause limit: more distinct terms than this made upstream's search fail
MAX_CLAUSES = 1024
INDEX_VERSION = 3

def _no_ranges() -> str:
    """Character-class ranges of the digits Unicode files as No (superscripts, fractions, circled numbers):
    word characters to Python, word breaks to UAX#29 ("use.⁵" is "use" there)."""
    import unicodedata

    ranges: list[list[int]] = []
    for code in range(0x30000):
        if unicodedata.category(chr(code)) == "No":
            if ranges and ranges[-1][1] == code - 1:
                ranges[-1][1] = code
            else:
                ranges.append([code, code])
    return "".join(re.escape(chr(a)) + ("-" + re.escape(chr(b)) if b > a else "") for a, b in ranges)


#: Han ideographs and Hiragana: one token per character in Lucene's StandardTokenizer
_IDEOGRAPHIC = "\u3041-\u309f\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003134f"
_NOT_WORD = _no_ranges() + _IDEOGRAPHIC
_WORD = rf"[^\W{_NOT_WORD}]"
_LETTER = rf"[^\W\d_{_NOT_WORD}]"
#: UAX#29 for word characters: MidNumLet ('.', '’') and Single_Quote join letter-letter and digit-digit,
#: MidLetter (':', '·') letter-letter, MidNum (',', ';') digit-digit
_TOKEN = re.compile(
    rf"[{_IDEOGRAPHIC}]|{_WORD}+(?:(?:(?<={_LETTER})[.'’＇．:·](?={_LETTER})|(?<=\d)[.'’＇．,;](?=\d)){_WORD}+)*",
    re.UNICODE,
)


class Analyzer:
    """Anserini's DefaultEnglishAnalyzer: tokenize (UAX#29 word rules), drop possessives, lower-case, drop
    stopwords, Porter-stem as Lucene does."""

    def __call__(self, text: str) -> list[str]:
        tokens = []
        for token in _TOKEN.findall(text):
            if len(token) >= 2 and token[-2] in "'’＇" and token[-1] in "sS":  # EnglishPossessiveFilter runs before lower-casing
                token = token[:-2]
            token = token.lower()
            if token and token not in LUCENE_STOPWORDS:
                tokens.append(porter.stem(token))
        return tokens


def search_source_hash() -> str:
    """A short hash of this module's source: part of the index cache key, so analyzer edits rebuild it."""
    import hashlib

    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:10]


def document_text(product: dict[str, Any]) -> str:
    """The text upstream indexed for a product."""
    option_text = ", and ".join(f"{name}: {', '.join(values)}" for name, values in product["options"].items())
    bullets = product["BulletPoints"]
    first_bullet = bullets[0] if bullets else ""
    return f"{product['Title']} {product['Description']} {first_bullet} {option_text}".lower()


def lucene_length(n_tokens: int) -> int:
    """The document length Lucene scores with: `byte4ToInt(intToByte4(n))`, exact below 24."""
    free = 24  # SmallFloat.NUM_FREE_VALUES
    if n_tokens < free:
        return n_tokens
    value = n_tokens - free
    bits = value.bit_length()
    if bits < 4:
        encoded = value
    else:
        shift = bits - 4
        encoded = ((value >> shift) & 0x07) | ((shift + 1) << 3)
    mantissa, shift = encoded & 0x07, (encoded >> 3) - 1
    return free + (mantissa if shift == -1 else (mantissa | 0x08) << shift)


@functools.lru_cache(maxsize=1)
def _lucene_bm25_class():
    """bm25s.BM25 whose index uses Lucene's quantized document lengths (imported lazily)."""
    import bm25s

    class LuceneBM25(bm25s.BM25):
        def build_index_from_ids(self, unique_token_ids, corpus_token_ids, show_progress=True, leave_progress=False):
            n_docs, n_vocab = len(corpus_token_ids), len(unique_token_ids)
            rows: list[int] = []
            cols: list[int] = []
            tfs: list[int] = []
            lengths = np.empty(n_docs, dtype=np.float64)
            for doc, ids in enumerate(corpus_token_ids):
                counts = Counter(ids)
                rows.extend([doc] * len(counts))
                cols.extend(counts.keys())
                tfs.extend(counts.values())
                lengths[doc] = lucene_length(len(ids))
            exact_total = sum(len(ids) for ids in corpus_token_ids)
            avgdl = exact_total / n_docs if n_docs and exact_total else 1.0
            row_arr = np.asarray(rows, dtype=self.int_dtype)
            col_arr = np.asarray(cols, dtype=self.int_dtype)
            tf = np.asarray(tfs, dtype=np.float64)
            df = np.bincount(col_arr, minlength=n_vocab).astype(np.float64)
            idf = np.log(1.0 + (n_docs - df + 0.5) / (df + 0.5))
            norm = self.k1 * (1.0 - self.b + self.b * lengths[row_arr] / avgdl)
            scores = (idf[col_arr] * tf / (tf + norm)).astype(self.dtype)
            self.nonoccurrence_array = None
            data, indices, indptr = self._np_csc(data=scores, rows=row_arr, cols=col_arr, shape=(n_docs, n_vocab))
            return {"data": data.astype(self.dtype), "indices": indices, "indptr": indptr, "num_docs": n_docs}

    return LuceneBM25


class SearchEngine:
    """A bm25s index over the catalog; `search(query)` returns up to 50 product indices, best first."""

    def __init__(self, products: Sequence[dict[str, Any]], cache_folder: Path | None = None) -> None:
        self.analyzer = Analyzer()
        self.n_docs = len(products)
        # Lucene breaks score ties by docid, upstream's ASIN: each document's rank in ASIN byte order
        # (documents without one, as in unit tests, keep their order among themselves)
        asins = [str(p.get("asin", "")) for p in products]
        self._tie_rank = np.empty(self.n_docs, dtype=np.int64)
        self._tie_rank[sorted(range(self.n_docs), key=lambda i: asins[i].encode())] = np.arange(self.n_docs)
        loaded = False
        if cache_folder is not None and (cache_folder / "done.json").is_file():
            try:
                meta = json.loads((cache_folder / "done.json").read_text())
                if (isinstance(meta, dict) and meta.get("n_docs") == self.n_docs
                        and meta.get("version") == INDEX_VERSION):
                    self.bm25 = _lucene_bm25_class().load(str(cache_folder), show_progress=False)
                    loaded = True
            except (OSError, ValueError, RecursionError, TypeError, KeyError, AttributeError):
                loaded = False  # a damaged index cache: rebuilt below
        if not loaded:
            corpus = [self.analyzer(document_text(p)) for p in products]
            self.bm25 = _lucene_bm25_class()(k1=0.9, b=0.4, method="lucene")
            self.bm25.index(corpus, show_progress=False)
            if cache_folder is not None:
                self._save(cache_folder)
        self.loaded_from_cache = loaded

    def _save(self, folder: Path) -> None:
        """Write the index next to `folder` and rename it into place, so that concurrent builders (worker
        processes) never read a half-written index."""
        import os
        import shutil
        import tempfile

        folder.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=folder.name + ".tmp", dir=folder.parent))
        try:
            self.bm25.save(str(staging), show_progress=False)
            (staging / "done.json").write_text(json.dumps({"n_docs": self.n_docs, "version": INDEX_VERSION}))
            if folder.exists():
                shutil.rmtree(folder, ignore_errors=True)  # an incomplete leftover (no done.json)
            os.replace(staging, folder)
        except OSError:
            pass  # another process renamed its copy first: theirs is identical
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def query_terms(self, query: str) -> list[str]:
        """Analyzed query terms that exist in the index (at most MAX_CLAUSES distinct ones, in order)."""
        terms = [t for t in self.analyzer(query) if t in self.bm25.vocab_dict and t != ""]
        distinct: dict[str, None] = {}
        for t in terms:
            if len(distinct) >= MAX_CLAUSES and t not in distinct:
                continue
            distinct[t] = None
        return [t for t in terms if t in distinct]

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every document for `query` (zeros where no term matches)."""
        terms = self.query_terms(query)
        if not terms:
            return np.zeros(self.n_docs, dtype=np.float32)
        return self.bm25.get_scores(terms)

    def search(self, query: str, k: int = SEARCH_RETURN_N) -> list[int]:
        """Indices of the top-k documents with a positive score, by score, ties by ASIN ascending."""
        scores = self.scores(query)
        hits = np.flatnonzero(scores > 0)
        if hits.size == 0:
            return []
        if hits.size > k:
            # keep every document scoring at least the k-th best, then order exactly
            kth = np.partition(scores[hits], hits.size - k)[hits.size - k]
            hits = hits[scores[hits] >= kth]
        order = np.lexsort((self._tie_rank[hits], -scores[hits]))
        return hits[order][:k].tolist()
