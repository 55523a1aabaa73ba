"""A deterministic generator of WebShop-format catalogs, for when the upstream files are not available.

It writes the three upstream files, in their JSON formats, so that the loader reads a generated catalog
exactly like the real one:

* ``items_shuffle_<n>.json``: a list of raw product dicts (``asin``, ``name``, ``full_description``,
  ``small_description``, ``pricing``, ``images``, ``query``, ``category``, ``product_category``,
  ``customization_options``, plus a few of the keys upstream drops at load);
* ``items_ins_v2_<n>.json``: ``{asin: {"attributes": [...], "instruction": "Find me ...",
  "instruction_attributes": [...]}}`` (about 40% of products get an instruction, as upstream's 415/1000);
* ``items_human_ins.json``: ``{asin: [{"instruction", "instruction_attributes", "instruction_options",
  "assignment_id", "worker_id"}, ...]}``.

Everything comes from one ``random.Random(seed)`` and the vocabulary in ``vocabulary.json`` (beside this
module, read once at import into the tables below), so a (seed, size) pair always yields the same bytes. The
vocabulary is the project's own, written to look like the upstream Amazon scrape: the five top-level
categories, product-category paths joined with ' › ', typed attributes ("long lasting", "with tea tree",
"for dry skin"), option groups and a sprinkle of the values that hit upstream's reward quirks (substring
colour matching: "standard" -> "tan", "peppermint" -> "mint").
"""

from __future__ import annotations

import json
import random
import zlib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

#: bump when the generator's output changes, so cached catalogs are rebuilt
GENERATOR_VERSION = 1

# ----------------------------------------------------------------------------------------------------
# Vocabulary (vocabulary.json, read once at import)
# ----------------------------------------------------------------------------------------------------

_VOCABULARY: dict[str, Any] = json.loads(
    resources.files(__package__).joinpath("vocabulary.json").read_text(encoding="utf-8")
)


def _pool(spec: list[str | list[str]]) -> list[str]:
    """An option value pool: named pools (strings) and literal lists, concatenated in order."""
    parts = [_VOCABULARY["pools"][part] if isinstance(part, str) else part for part in spec]
    return parts[0] if len(parts) == 1 else [value for part in parts for value in part]


#: top-level category -> root of its product-category path
ROOTS: dict[str, str] = _VOCABULARY["roots"]

#: colour values as they appear in option lists (some compound, one with '/', a few quirky ones)
COLORS: list[str] = _VOCABULARY["pools"]["colors"]
#: option values that upstream's substring colour normalisation mangles (kept rare on purpose)
QUIRKY_STYLES: list[str] = _VOCABULARY["pools"]["quirky_styles"]
QUIRKY_FLAVORS: list[str] = _VOCABULARY["pools"]["quirky_flavors"]
#: the other named value pools of OPTION_TEMPLATES
APPAREL_SIZES: list[str] = _VOCABULARY["pools"]["apparel_sizes"]
SHOE_SIZES: list[str] = _VOCABULARY["pools"]["shoe_sizes"]
VOLUME_SIZES: list[str] = _VOCABULARY["pools"]["volume_sizes"]
FOOD_SIZES: list[str] = _VOCABULARY["pools"]["food_sizes"]
CAPACITIES: list[str] = _VOCABULARY["pools"]["capacities"]
LENGTHS: list[str] = _VOCABULARY["pools"]["lengths"]
FLAVORS: list[str] = _VOCABULARY["pools"]["flavors"]
SCENTS: list[str] = _VOCABULARY["pools"]["scents"]
STYLES: list[str] = _VOCABULARY["pools"]["styles"]
MATERIALS: list[str] = _VOCABULARY["pools"]["materials"]
WOOD_COLORS: list[str] = _VOCABULARY["pools"]["wood_colors"]
BED_SIZES: list[str] = _VOCABULARY["pools"]["bed_sizes"]
DESK_SIZES: list[str] = _VOCABULARY["pools"]["desk_sizes"]
PILLOW_SIZES: list[str] = _VOCABULARY["pools"]["pillow_sizes"]
ART_SIZES: list[str] = _VOCABULARY["pools"]["art_sizes"]

#: option group templates: group name -> value pool and (min, max) values offered per product
OPTION_TEMPLATES: dict[str, list[tuple[str, list[str], tuple[int, int]]]] = {
    key: [(group["name"], _pool(group["pool"]), tuple(group["count"])) for group in groups]
    for key, groups in _VOCABULARY["option_templates"].items()
}

#: category-wide attributes: (phrase, kind) with kind "adj" (before the type), "with" or "for" (after it)
CATEGORY_ATTRS: dict[str, list[tuple[str, str]]] = {
    category: [tuple(attr) for attr in attrs] for category, attrs in _VOCABULARY["category_attrs"].items()
}


@dataclass(frozen=True)
class ProductType:
    """One leaf of the category tree: how its products are named, searched for and customised."""

    category: str
    path: tuple[str, ...]  # below the root; the last element is the leaf, used in "Find me <leaf>"
    noun: str  # title noun phrase, e.g. "Body Butter"
    queries: tuple[str, ...]  # the search queries that "scraped" this type (upstream's `query` field)
    attrs: tuple[tuple[str, str], ...]  # type-specific attributes
    options: str  # key of OPTION_TEMPLATES
    price: tuple[float, float]  # typical price range in dollars


PRODUCT_TYPES: list[ProductType] = [
    ProductType(t["category"], tuple(t["path"]), t["noun"], tuple(t["queries"]), tuple(tuple(a) for a in t["attrs"]),
                t["options"], tuple(t["price"]))
    for t in _VOCABULARY["product_types"]
]

BRAND_HEADS: list[str] = _VOCABULARY["brand_heads"]
BRAND_TAILS: list[str] = _VOCABULARY["brand_tails"]
TITLE_SUFFIXES: list[str] = _VOCABULARY["title_suffixes"]
DESCRIPTION_TEMPLATES: list[str] = _VOCABULARY["description_templates"]
BULLET_TEMPLATES: list[str] = _VOCABULARY["bullet_templates"]
HUMAN_TEMPLATES: list[str] = _VOCABULARY["human_templates"]


# ----------------------------------------------------------------------------------------------------
# Generation
# ----------------------------------------------------------------------------------------------------


def _asin(rng: random.Random, taken: set[str]) -> str:
    """A fresh 10-character ASIN-like id (B0 + 8 upper-case alphanumerics), unique within the catalog."""
    alphabet = "ABCDEFGHJKLMNPQRSTUVWXYZ0123456789"
    while True:
        asin = "B0" + "".join(rng.choice(alphabet) for _ in range(8))
        if asin not in taken:
            taken.add(asin)
            return asin


def _price_string(rng: random.Random, lo: float, hi: float) -> str:
    """Upstream `pricing` strings: '$12.99', '$10.49 - $18.99', or (rarely) '' meaning no price."""
    roll = rng.random()
    if roll < 0.01:
        return ""
    base = round(rng.uniform(lo, hi), 2)
    base = max(0.99, float(int(base)) + rng.choice([0.99, 0.49, 0.95, 0.0, 0.89]))
    if roll < 0.25:
        top = round(base * rng.uniform(1.1, 1.8), 2)
        return f"${base:.2f} - ${top:.2f}"
    return f"${base:.2f}"


def _options(rng: random.Random, template: str) -> dict[str, Any] | str:
    """Raw `customization_options`: '' when none, else {Name: [{value, image}, ...]} (sometimes a null group)."""
    groups = OPTION_TEMPLATES[template]
    if not groups or rng.random() < 0.08:
        return ""
    used: set[str] = set()
    out: dict[str, Any] = {}
    for name, pool, (lo, hi) in groups:
        if len(groups) > 1 and rng.random() < 0.12:
            continue  # not every product offers every group
        values = [v for v in rng.sample(pool, min(len(pool), rng.randint(lo, hi))) if v not in used]
        if name == "Size":
            values.sort(key=pool.index)  # shops list sizes in size order
        if not values:
            continue
        used.update(values)
        out[name] = [{"value": v.title() if name == "Color" and rng.random() < 0.3 else v,
                      "image": f"https://images.example.invalid/{name.lower()}/{zlib.crc32(v.encode()):08x}.jpg"}
                     for v in values]
    if out and rng.random() < 0.03:
        out["Pattern Name"] = None  # upstream has null groups; they are skipped at load
    return out or ""


def _title(rng: random.Random, brand: str, ptype: ProductType, attrs: list[tuple[str, str]]) -> str:
    adjs = [a for a, kind in attrs if kind == "adj"][:2]
    withs = [a for a, kind in attrs if kind == "with"][:1]
    parts = [brand] + [a.title() for a in adjs] + [ptype.noun]
    if withs and rng.random() < 0.6:
        parts += ["with", withs[0].title()]
    suffix = rng.choice(TITLE_SUFFIXES)
    if suffix:
        parts.append(suffix)
    return " ".join(parts)


def _fill(template: str, rng: random.Random, brand: str, ptype: ProductType, attrs: list[tuple[str, str]]) -> str:
    names = [a for a, _ in attrs] or ["quality materials"]
    fors = [a for a, kind in attrs if kind == "for"] or ["daily use"]
    adjs = [a for a, kind in attrs if kind == "adj"] or ["durable"]
    attr = rng.choice(names)
    attr2 = rng.choice([n for n in names if n != attr] or names)
    return template.format(brand=brand, noun=ptype.noun, noun_l=ptype.noun.lower(), attr=attr, attr2=attr2,
                           ATTR=attr.upper(), use=rng.choice(fors), adj=rng.choice(adjs))


def _instruction(rng: random.Random, ptype: ProductType, chosen: list[tuple[str, str]]) -> str:
    """'Find me <adj, adj> <leaf> [with <x, y>] [for <z>]', the shape of upstream's synthetic instructions."""
    adj = [a for a, k in chosen if k == "adj"]
    with_ = [a for a, k in chosen if k == "with"]
    for_ = [a for a, k in chosen if k == "for"]
    text = "Find me " + (", ".join(adj) + " " if adj else "") + ptype.path[-1].lower()
    if with_:
        text += " with " + ", ".join(with_)
    if for_:
        text += " for " + ", ".join(for_)
    return text


def _human_instructions(rng: random.Random, ptype: ProductType, attrs: list[tuple[str, str]],
                        options: dict[str, list[str]]) -> list[dict[str, Any]]:
    """One to three crowd-worker-style instructions with attributes and a subset of option values."""
    out = []
    for k in range(rng.randint(1, 3)):
        chosen = rng.sample(attrs, min(len(attrs), rng.randint(1, 2))) if attrs and rng.random() > 0.05 else []
        opts = [rng.choice(vals) for vals in options.values() if vals and rng.random() < 0.7]
        with_opts = ""
        if opts:
            with_opts = ", " + " and ".join(f"in {o}" if i == 0 else o for i, o in enumerate(opts))
        attr_text = " and ".join(a for a, _ in chosen) or "good quality"
        a_adj = " ".join(a for a, kind in chosen if kind == "adj") or "a"
        text = rng.choice(HUMAN_TEMPLATES).format(a_adj=a_adj, noun_l=ptype.noun.lower(), attr_text=attr_text,
                                                  with_opts=with_opts)
        out.append({
            "instruction": text + rng.choice([".", "", ""]),
            "instruction_attributes": [a for a, _ in chosen],
            "instruction_options": opts,
            "assignment_id": f"GEN{rng.randrange(10**8):08d}",
            "worker_id": f"W{rng.randrange(10**6):06d}",
        })
    return out


def _normalised_options(raw: dict[str, Any] | str) -> dict[str, list[str]]:
    """The option dict upstream builds at load (lowercase, '/' -> ' | '), used for human instructions."""
    if not raw:
        return {}
    return {name.lower(): [c["value"].strip().replace("/", " | ").lower() for c in contents]
            for name, contents in raw.items() if contents is not None}


def generate_catalog(seed: int = 0, size: int = 1000) -> tuple[list[dict], dict[str, dict], dict[str, list[dict]]]:
    """Return (products, attributes, human instructions) in the upstream files' formats."""
    if size < 1:
        raise ValueError(f"catalog size must be positive, got {size}")
    rng = random.Random(f"webshop-catalog-{seed}")
    products: list[dict] = []
    attributes: dict[str, dict] = {}
    human: dict[str, list[dict]] = {}
    taken: set[str] = set()
    for i in range(size):
        ptype = PRODUCT_TYPES[rng.randrange(len(PRODUCT_TYPES))]
        asin = _asin(rng, taken)
        brand = rng.choice(BRAND_HEADS) + rng.choice(BRAND_TAILS)
        pool = list(ptype.attrs) + rng.sample(CATEGORY_ATTRS[ptype.category], 4)
        seen: set[str] = set()
        pool = [a for a in pool if not (a[0] in seen or seen.add(a[0]))]
        attrs = rng.sample(pool, rng.randint(3, min(6, len(pool))))
        query = rng.choice(ptype.queries)
        options = _options(rng, ptype.options)
        description = " ".join(_fill(t, rng, brand, ptype, attrs)
                               for t in rng.sample(DESCRIPTION_TEMPLATES, rng.randint(3, 5)))
        bullets = [_fill(t, rng, brand, ptype, attrs) for t in rng.sample(BULLET_TEMPLATES, rng.randint(3, 5))]
        products.append({
            "asin": asin,
            "name": _title(rng, brand, ptype, attrs),
            "full_description": description,
            "small_description": bullets,
            "pricing": _price_string(rng, *ptype.price),
            "images": [f"https://images.example.invalid/{asin}/main.jpg"],
            "query": query,
            "category": ptype.category,
            "product_category": " › ".join((ROOTS[ptype.category],) + ptype.path),
            "customization_options": options,
            "average_rating": round(rng.uniform(3.0, 5.0), 1),
            "brand": brand,
            "list_price": "",
        })
        record: dict[str, Any] = {"attributes": [a for a, _ in attrs]}
        if rng.random() < 0.415 and attrs:
            chosen = rng.sample(attrs, rng.randint(1, min(3, len(attrs))))
            chosen.sort(key=lambda a: ("adj", "with", "for").index(a[1]))
            record["instruction"] = _instruction(rng, ptype, chosen)
            record["instruction_attributes"] = [a for a, _ in chosen]
        attributes[asin] = record
        if rng.random() < 0.5:
            human[asin] = _human_instructions(rng, ptype, attrs, _normalised_options(options))
    return products, attributes, human


def write_catalog(folder: Path, seed: int = 0, size: int = 1000) -> dict[str, Path]:
    """Generate and write the three files into `folder` (atomically, file by file); return their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    products, attributes, human = generate_catalog(seed, size)
    paths = {
        "products": folder / f"items_shuffle_{size}.json",
        "attributes": folder / f"items_ins_v2_{size}.json",
        "human": folder / "items_human_ins.json",
    }
    for key, data in (("products", products), ("attributes", attributes), ("human", human)):
        tmp = paths[key].with_suffix(f".tmp{random.randrange(10**9)}")
        tmp.write_text(json.dumps(data))
        tmp.replace(paths[key])
    return paths
