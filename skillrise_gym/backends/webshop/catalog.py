"""The product catalog: upstream files (checked by size and SHA-256) or a generated catalog, loaded like upstream.

`load_products` follows upstream's `engine.load_products` field by field (see the spec, section 1): the
dropped keys, the ASIN filter, Title/Description/BulletPoints, the '$'-split price parsing and price tags,
lower-cased options with '/' -> ' | ', `Attributes` (or ['DUMMY_ATTR']), instructions, and the per-product
price drawn once at load (uniform inside a price range).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import re
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from skillrise_gym.backends.base import SkillRiseError
from skillrise_gym.paths import cache_dir, sha256_file

log = logging.getLogger(__name__)

#: the upstream "small" (1k products) files: name -> (bytes, sha256)
UPSTREAM_FILES: dict[str, tuple[int, str]] = {
    "items_shuffle_1000.json": (4467013, "30a4765c3a327af72d9a9a95a6b2486d516f0fa1d3ecd83681901ce82a21b269"),
    "items_ins_v2_1000.json": (147099, "f88a36314a397b53b3d9c3fa5878e5f7b26d35019a51ec83fbedeca61a948f6f"),
    "items_human_ins.json": (5137548, "cf78667548a71786e1d9049c24b802e48e1084ad4bb021cae56ce1f6d96954a3"),
}
PRODUCTS_FILE, ATTRIBUTES_FILE, HUMAN_FILE = UPSTREAM_FILES

#: keys upstream pops from every raw product before use
DROPPED_KEYS = (
    "product_information", "brand", "brand_url", "list_price", "availability_quantity", "availability_status",
    "total_reviews", "total_answered_questions", "seller_id", "seller_name", "fulfilled_by_amazon",
    "fast_track_message", "aplus_present", "small_description_old",
)


class DataIntegrityError(SkillRiseError, ValueError):
    """A data file is present but is not the expected file (wrong size or hash, truncated, corrupt)."""



def verify_file(path: Path) -> None:
    """Check an upstream file's size, then its SHA-256; raise DataIntegrityError naming file and expected hash."""
    size, expected = UPSTREAM_FILES[path.name]
    actual_size = path.stat().st_size
    if actual_size != size:
        raise DataIntegrityError(
            f"{path} has {actual_size} bytes, expected {size} (sha256 {expected}); the file is truncated or "
            f"not the upstream WebShop file. Re-download it (see `skillrise-data webshop`)."
        )
    actual = sha256_file(path)
    if actual != expected:
        raise DataIntegrityError(f"{path} has sha256 {actual}, expected {expected}; re-download the upstream file.")


def upstream_paths(data_dir: str | os.PathLike | None, human_goals: bool) -> dict[str, Path] | None:
    """The verified upstream files in `data_dir`, or None when the folder lacks the files a catalog needs.

    Every known file that is present is verified, so a wrong or truncated file is an error even when the
    catalog would fall back to a generated one.
    """
    if not data_dir:
        return None
    folder = Path(data_dir).expanduser()
    present = {name: folder / name for name in UPSTREAM_FILES if (folder / name).is_file()}
    for path in present.values():
        verify_file(path)
    needed = [PRODUCTS_FILE, ATTRIBUTES_FILE] + ([HUMAN_FILE] if human_goals else [])
    missing = [name for name in needed if name not in present]
    if missing:
        log.warning("WebShop data folder %s lacks %s; using a generated catalog instead", folder, ", ".join(missing))
        return None
    return {"products": present[PRODUCTS_FILE], "attributes": present[ATTRIBUTES_FILE],
            "human": present.get(HUMAN_FILE)}


def generated_paths(seed: int, size: int) -> dict[str, Path]:
    """The generated catalog's files in the cache, generating them once per (generator version, seed, size)."""
    from skillrise_gym.backends.webshop import generator

    # the generator's source hash is part of the key, so editing it can never serve a stale catalog
    source_hash = hashlib.sha256(Path(generator.__file__).read_bytes()).hexdigest()[:10]
    folder = cache_dir("webshop", f"catalog-v{generator.GENERATOR_VERSION}-{source_hash}-seed{seed}-n{size}")
    paths = {
        "products": folder / f"items_shuffle_{size}.json",
        "attributes": folder / f"items_ins_v2_{size}.json",
        "human": folder / "items_human_ins.json",
    }
    if not all(p.is_file() for p in paths.values()):
        generator.write_catalog(folder, seed=seed, size=size)
    return paths


def _read_json(path: Path) -> Any:
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DataIntegrityError(f"{path} is not valid JSON ({exc}); the file is corrupt or truncated") from exc


def parse_pricing(pricing: Any) -> tuple[list[float], str]:
    """Upstream price parsing: split on '$', drop the first piece, keep digits and dots; tag the first one or two."""
    if pricing is None or not pricing:
        return [100.0], "$100.0"
    values = [float(Decimal(re.sub(r"[^\d.]", "", piece))) for piece in pricing.split("$")[1:]]
    if len(values) == 1:
        return values, f"${values[0]}"
    return values[:2], f"${values[0]} to ${values[1]}"


def parse_options(customization_options: Any) -> dict[str, list[str]]:
    """{group: [values]} with lower-cased names and values, '/' -> ' | ', null groups skipped (upstream)."""
    options: dict[str, list[str]] = {}
    if customization_options:
        for name, contents in customization_options.items():
            if contents is None:
                continue
            options[name.lower()] = [c["value"].strip().replace("/", " | ").lower() for c in contents]
    return options


@dataclass
class Catalog:
    """Loaded products, as upstream's `all_products`, `product_item_dict` and `product_prices`."""

    products: list[dict[str, Any]]
    prices: dict[str, float]
    source: str  # "upstream:<folder>" or "generated:seed=<s>,size=<n>"
    cache_key: str  # names the search index cache
    by_asin: dict[str, dict[str, Any]] = field(init=False)
    attribute_to_asins: dict[str, set[str]] = field(init=False)

    def __post_init__(self) -> None:
        self.by_asin = {p["asin"]: p for p in self.products}
        self.attribute_to_asins = {}
        for p in self.products:
            for a in p["Attributes"]:
                self.attribute_to_asins.setdefault(a, set()).add(p["asin"])


def load_products(raw_products: list[dict], attributes: dict[str, dict], human: dict[str, list] | None,
                  human_goals: bool, rng: random.Random) -> tuple[list[dict], dict[str, float]]:
    """Upstream `load_products` + `generate_product_prices` over already-parsed JSON."""
    products: list[dict] = []
    seen: set[str] = set()
    for raw in raw_products:
        asin = raw["asin"]
        if asin == "nan" or len(asin) > 10 or asin in seen:
            continue
        seen.add(asin)
        p = {k: v for k, v in raw.items() if k not in DROPPED_KEYS}
        p["Title"] = raw["name"]
        p["Description"] = raw["full_description"]
        p["Reviews"] = []
        p["Rating"] = "N.A."
        small = raw["small_description"]
        p["BulletPoints"] = small if isinstance(small, list) else [small]
        p["pricing"], p["Price"] = parse_pricing(raw.get("pricing"))
        p["options"] = parse_options(raw["customization_options"])
        record = attributes.get(asin)
        p["Attributes"] = record["attributes"] if record is not None and "attributes" in record else ["DUMMY_ATTR"]
        if human_goals:
            if human and asin in human:
                p["instructions"] = human[asin]
        else:
            p["instruction_text"] = (record or {}).get("instruction")
            p["instruction_attributes"] = (record or {}).get("instruction_attributes")
        images = raw.get("images") or [None]
        p["MainImage"] = images[0]
        p["query"] = raw["query"].lower().strip()
        products.append(p)
    prices: dict[str, float] = {}
    for p in products:
        pricing = p["pricing"]
        prices[p["asin"]] = pricing[0] if len(pricing) == 1 else rng.uniform(*pricing[:2])
    return products, prices


def load_catalog(data_dir: str | os.PathLike | None, num_products: int, catalog_seed: int, human_goals: bool,
                 rng: random.Random) -> Catalog:
    """The upstream catalog when `data_dir` holds it (verified), else the generated one (cached on disk)."""
    paths = upstream_paths(data_dir, human_goals)
    if paths is not None:
        source = f"upstream:{paths['products'].parent}"
        cache_key = "upstream-1000"
    else:
        paths = generated_paths(catalog_seed, num_products)
        source = f"generated:seed={catalog_seed},size={num_products}"
        cache_key = paths["products"].parent.name
    raw_products = _read_json(paths["products"])
    attributes = _read_json(paths["attributes"])
    human = _read_json(paths["human"]) if human_goals and paths.get("human") else None
    if not isinstance(raw_products, list) or not isinstance(attributes, dict):
        raise DataIntegrityError(f"{paths['products']} must hold a JSON list and {paths['attributes']} a JSON object")
    products, prices = load_products(raw_products, attributes, human, human_goals, rng)
    return Catalog(products=products, prices=prices, source=source, cache_key=cache_key)
