"""The Porter stemmer as Lucene's `PorterStemFilter` applies it (what upstream WebShop's pyserini index uses).

Lucene's `org.apache.lucene.analysis.en.PorterStemmer` is Martin Porter's own C/Java implementation of the
1980 algorithm, with its three departures from the paper, and they matter for search results:

- words of one or two letters are left alone ("us" stays "us"; Snowball's "porter", as PyStemmer ships it,
  gives "u", so "use" and "us" collide there);
- step 2 rewrites "bli" to "ble" (the paper: "abli" to "able"), so "assembly" -> "assembl";
- step 2 rewrites "logi" to "log", so "technology" -> "technolog".

Within a step, the first suffix that matches decides, even where its measure condition then fails (the C
code breaks out of its switch), as here. Input is one lower-cased token; anything other than a, e, i, o, u
(and y after a consonant) counts as a consonant, as in Lucene.
"""

from __future__ import annotations

import functools

_VOWELS = frozenset("aeiou")

# step 2 (Lucene's step3): by the penultimate letter, (suffix, replacement) tried in order
_STEP2 = {
    "a": (("ational", "ate"), ("tional", "tion")),
    "c": (("enci", "ence"), ("anci", "ance")),
    "e": (("izer", "ize"),),
    "l": (("bli", "ble"), ("alli", "al"), ("entli", "ent"), ("eli", "e"), ("ousli", "ous")),
    "o": (("ization", "ize"), ("ation", "ate"), ("ator", "ate")),
    "s": (("alism", "al"), ("iveness", "ive"), ("fulness", "ful"), ("ousness", "ous")),
    "t": (("aliti", "al"), ("iviti", "ive"), ("biliti", "ble")),
    "g": (("logi", "log"),),
}
# step 3 (Lucene's step4): by the last letter
_STEP3 = {
    "e": (("icate", "ic"), ("ative", ""), ("alize", "al")),
    "i": (("iciti", "ic"),),
    "l": (("ical", "ic"), ("ful", "")),
    "s": (("ness", ""),),
}
# step 4 (Lucene's step5): by the penultimate letter, suffixes removed where the measure is > 1
_STEP4 = {
    "a": ("al",),
    "c": ("ance", "ence"),
    "e": ("er",),
    "i": ("ic",),
    "l": ("able", "ible"),
    "n": ("ant", "ement", "ment", "ent"),
    "o": ("ion", "ou"),  # "ion" only after s or t
    "s": ("ism",),
    "t": ("ate", "iti"),
    "u": ("ous",),
    "v": ("ive",),
    "z": ("ize",),
}


def _consonant(word: str, i: int) -> bool:
    ch = word[i]
    if ch in _VOWELS:
        return False
    if ch == "y":
        return i == 0 or not _consonant(word, i - 1)
    return True


def _measure(stem: str) -> int:
    """m in [C](VC)^m[V]: the number of vowel-consonant sequences."""
    n, i, length = 0, 0, len(stem)
    while i < length and _consonant(stem, i):
        i += 1
    while i < length:
        while i < length and not _consonant(stem, i):
            i += 1
        if i >= length:
            break
        n += 1
        while i < length and _consonant(stem, i):
            i += 1
    return n


def _has_vowel(stem: str) -> bool:
    return any(not _consonant(stem, i) for i in range(len(stem)))


def _double_consonant(word: str) -> bool:
    return len(word) >= 2 and word[-1] == word[-2] and _consonant(word, len(word) - 1)


def _cvc(word: str) -> bool:
    """Ends consonant-vowel-consonant, the last not w, x or y (e.g. -wil, -hop)."""
    i = len(word) - 1
    return (i >= 2 and _consonant(word, i) and not _consonant(word, i - 1) and _consonant(word, i - 2)
            and word[i] not in "wxy")


def _step1ab(w: str) -> str:
    if w.endswith("s"):
        if w.endswith("sses"):
            w = w[:-2]
        elif w.endswith("ies"):
            w = w[:-3] + "i"
        elif w[-2] != "s":
            w = w[:-1]
    if w.endswith("eed"):
        if _measure(w[:-3]) > 0:
            w = w[:-1]
        return w
    for suffix in ("ed", "ing"):
        if w.endswith(suffix) and _has_vowel(w[:-len(suffix)]):
            w = w[:-len(suffix)]
            if w.endswith(("at", "bl", "iz")):
                return w + "e"
            if _double_consonant(w):
                return w if w[-1] in "lsz" else w[:-1]
            if _measure(w) == 1 and _cvc(w):
                return w + "e"
            return w
        if w.endswith(suffix):
            return w  # "ed"/"ing" after a stem without a vowel: nothing
    return w


def _step1c(w: str) -> str:
    if w.endswith("y") and _has_vowel(w[:-1]):
        return w[:-1] + "i"
    return w


def _replace_first_match(w: str, rules: tuple[tuple[str, str], ...]) -> str:
    for suffix, replacement in rules:
        if w.endswith(suffix):
            stem = w[:-len(suffix)]
            return stem + replacement if _measure(stem) > 0 else w
    return w


def _step4(w: str) -> str:
    for suffix in _STEP4.get(w[-2], ()) if len(w) >= 2 else ():
        if not w.endswith(suffix):
            continue
        stem = w[:-len(suffix)]
        if suffix == "ion" and not (stem and stem[-1] in "st"):
            continue  # then "ou" is tried, as the C code does
        return stem if _measure(stem) > 1 else w
    return w


def _step5(w: str) -> str:
    if w.endswith("e"):
        m = _measure(w[:-1])
        if m > 1 or (m == 1 and not _cvc(w[:-1])):
            w = w[:-1]
    if w.endswith("ll") and _measure(w) > 1:
        w = w[:-1]
    return w


@functools.lru_cache(maxsize=200_000)
def stem(word: str) -> str:
    """The stem Lucene's PorterStemFilter gives a lower-cased token."""
    if len(word) <= 2:
        return word
    w = _step1ab(word)
    w = _step1c(w)
    if len(w) >= 2:
        w = _replace_first_match(w, _STEP2.get(w[-2], ()))
    w = _replace_first_match(w, _STEP3.get(w[-1], ())) if w else w
    w = _step4(w)
    return _step5(w)
