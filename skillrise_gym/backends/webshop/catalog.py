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
from skillrise_gym.paths import atomic_write, cache_dir, sha256_file

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


#: (folder, missing files) already warned about in this process
_WARNED: set[tuple[str, tuple[str, ...]]] = set()


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
        if (str(folder), tuple(missing)) not in _WARNED:  # once per process, not once per env
            _WARNED.add((str(folder), tuple(missing)))
            log.warning("WebShop data folder %s lacks %s; using a generated catalog instead", folder,
                        ", ".join(missing))
        return None
    return {"products": present[PRODUCTS_FILE], "attributes": present[ATTRIBUTES_FILE],
            "human": present.get(HUMAN_FILE)}


#: the generated catalog's manifest (each file's SHA-256), written once its files are complete
MANIFEST = "manifest.json"


def generated_paths(seed: int, size: int) -> dict[str, Path]:
    """The generated catalog's files in the cache, generating them once per (generator version, seed, size).

    The cache is trusted only when its manifest lists every file's SHA-256 and the files match it: a damaged
    cache (edited, truncated, valid JSON of the wrong shape, a folder from before manifests) is rebuilt."""
    from skillrise_gym.backends.webshop import generator

    # the generator's source hash is part of the key, so editing it can never serve a stale catalog
    source_hash = hashlib.sha256(Path(generator.__file__).read_bytes()).hexdigest()[:10]
    folder = cache_dir("webshop", f"catalog-v{generator.GENERATOR_VERSION}-{source_hash}-seed{seed}-n{size}")
    paths = {
        "products": folder / f"items_shuffle_{size}.json",
        "attributes": folder / f"items_ins_v2_{size}.json",
        "human": folder / "items_human_ins.json",
    }
    if not _cache_intact(folder, paths):
        rebuild_generated(folder, seed, size)
    return paths


def rebuild_generated(folder: Path, seed: int, size: int) -> None:
    """(Re)generate the catalog's files in `folder`, then write its manifest (atomically, last)."""
    from skillrise_gym.backends.webshop import generator

    if (folder / MANIFEST).exists():
        log.warning("WebShop catalog cache %s is damaged; rebuilding it", folder)
    paths = generator.write_catalog(folder, seed=seed, size=size)
    manifest = {"files": {path.name: sha256_file(path) for path in paths.values()}}
    atomic_write(folder / MANIFEST, json.dumps(manifest))


def _cache_intact(folder: Path, paths: dict[str, Path]) -> bool:
    """Whether every file of a generated catalog is there and matches the folder's manifest."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
        files = manifest["files"]
        return all(isinstance(files.get(p.name), str) and p.is_file() and sha256_file(p) == files[p.name]
                   for p in paths.values())
    except (OSError, ValueError, RecursionError, TypeError, KeyError, AttributeError):
        return False


def _read_json(path: Path) -> Any:
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DataIntegrityError(f"{path} is not valid JSON ({exc}); the file is corrupt or truncated") from exc
    except RecursionError:
        raise DataIntegrityError(f"{path} nests JSON too deeply to be a WebShop catalog file; it is damaged") from None


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
    """The upstream catalog when `data_dir` holds it (verified), else the generated one (cached on disk).

    Files of the wrong shape raise DataIntegrityError naming them; a generated catalog's cache that fails so
    is rebuilt once first (`rng` is only drawn from by a load that succeeds)."""
    paths = upstream_paths(data_dir, human_goals)
    if paths is not None:
        source = f"upstream:{paths['products'].parent}"
        return _load(paths, human_goals, rng, source, "upstream-1000")
    paths = generated_paths(catalog_seed, num_products)
    source = f"generated:seed={catalog_seed},size={num_products}"
    folder = paths["products"].parent
    state = rng.getstate()
    try:
        return _load(paths, human_goals, rng, source, folder.name)
    except DataIntegrityError as exc:
        log.warning("WebShop catalog cache %s is unreadable (%s); rebuilding it", folder, exc)
    rng.setstate(state)
    rebuild_generated(folder, catalog_seed, num_products)
    return _load(paths, human_goals, rng, source, folder.name)


def _load(paths: dict[str, Path | None], human_goals: bool, rng: random.Random, source: str,
          cache_key: str) -> Catalog:
    """Read and load a catalog's files; DataIntegrityError when they do not have a WebShop catalog's shape."""
    raw_products = _read_json(paths["products"])
    attributes = _read_json(paths["attributes"])
    human = _read_json(paths["human"]) if human_goals and paths.get("human") else None
    if not isinstance(raw_products, list) or not isinstance(attributes, dict):
        raise DataIntegrityError(f"{paths['products']} must hold a JSON list and {paths['attributes']} a JSON object")
    if human is not None and not isinstance(human, dict):
        raise DataIntegrityError(f"{paths['human']} must hold a JSON object")
    try:
        products, prices = load_products(raw_products, attributes, human, human_goals, rng)
        catalog = Catalog(products=products, prices=prices, source=source, cache_key=cache_key)
    except (TypeError, KeyError, AttributeError, IndexError, ValueError, ArithmeticError) as exc:
        files = ", ".join(str(p) for p in paths.values() if p is not None)
        raise DataIntegrityError(f"the WebShop catalog files {files} do not have a catalog's shape "
                                 f"({type(exc).__name__}: {exc}); they are damaged") from None
    return catalog
