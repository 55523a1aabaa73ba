"""WebShop catalog: upstream file checks, the generated catalog's format and determinism, goals and splits."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest

pytest.importorskip("bm25s")
pytest.importorskip("rapidfuzz")

from conftest import SHARED_DATA, need_data  # noqa: E402

from skillrise_gym.backends.webshop import catalog as C  # noqa: E402
from skillrise_gym.backends.webshop.backend import WebShopBackend  # noqa: E402
from skillrise_gym.backends.webshop.generator import ROOTS, generate_catalog  # noqa: E402
from skillrise_gym.backends.webshop.goals import SPLITS, make_goals, split_range  # noqa: E402

SHARED_WEBSHOP = SHARED_DATA / "webshop"


# ------------------------------------------------------------------------------------------ generator


def test_generator_is_deterministic_and_seeded():
    a = generate_catalog(seed=3, size=60)
    b = generate_catalog(seed=3, size=60)
    c = generate_catalog(seed=4, size=60)
    assert json.dumps(a) == json.dumps(b)
    assert json.dumps(a) != json.dumps(c)


def test_generated_files_have_upstream_formats():
    products, attributes, human = generate_catalog(seed=0, size=300)
    assert len({p["asin"] for p in products}) == 300
    assert {p["category"] for p in products} == set(ROOTS)
    for p in products:
        assert len(p["asin"]) == 10 and p["asin"].startswith("B0")
        assert {"name", "full_description", "small_description", "pricing", "images", "query",
                "product_category", "customization_options"} <= set(p)
        assert p["product_category"].startswith(ROOTS[p["category"]] + " › ")
        assert p["pricing"] == "" or p["pricing"].startswith("$")
        opts = p["customization_options"]
        assert opts == "" or all(v is None or all({"value", "image"} <= set(x) for x in v) for v in opts.values())
    with_instruction = [r for r in attributes.values() if "instruction" in r]
    assert 0.3 < len(with_instruction) / 300 < 0.55
    for r in with_instruction:
        assert r["instruction"].startswith("Find me ") and set(r["instruction_attributes"]) <= set(r["attributes"])
    for instructions in human.values():
        for h in instructions:
            assert {"instruction", "instruction_attributes", "instruction_options"} <= set(h)
    # a few price ranges, slashes in option values and null option groups, like the upstream scrape
    assert any(" - $" in p["pricing"] for p in products)
    assert any("/" in v["value"] for p in products if p["customization_options"]
               for g in p["customization_options"].values() if g for v in g)


def test_generated_1k_catalog_has_thousands_of_goals_and_all_splits():
    backend = WebShopBackend(noun_matcher="fallback")
    info = backend.catalog_info()
    assert info["source"] == "generated:seed=0,size=1000" and info["products"] == 1000
    assert 2500 <= info["goals"] <= 8000
    sizes = {split: len(backend.list_tasks(split)) for split in backend.splits}
    assert sizes["test"] == 500 and sizes["eval"] == 1000 and sizes["train"] == info["goals"] - 1500
    test = backend.list_tasks("test")
    assert [t.id for t in test[:3]] == ["goal-0", "goal-1", "goal-2"]
    assert {t.family for t in test} == set(ROOTS)
    goals = backend.shop.goals
    for t in test[:50]:
        g = goals[t.payload["goal_index"]]
        assert t.difficulty == len(g["attributes"]) + len(g["goal_options"])
        assert t.family == g["category"]


def test_generated_catalog_is_cached_on_disk():
    first = C.generated_paths(7, 40)
    stamp = first["products"].stat().st_mtime_ns
    second = C.generated_paths(7, 40)
    assert second == first and second["products"].stat().st_mtime_ns == stamp


# ------------------------------------------------------------------------------------------ goals


def test_goal_shuffle_reproduces_upstreams_global_seed_233():
    products, attributes, _ = generate_catalog(seed=1, size=120)
    loaded, prices = C.load_products(products, attributes, None, False, random.Random(5))
    ours = make_goals(loaded, prices, False, random.Random(9), shuffle_seed=233)
    # upstream: build in product order, then random.seed(233); random.shuffle(goals)
    from skillrise_gym.backends.webshop.goals import synthetic_goals

    theirs = synthetic_goals(loaded, prices, random.Random(9))
    state = random.getstate()
    try:
        random.seed(233)
        random.shuffle(theirs)
    finally:
        random.setstate(state)
    assert ours == theirs


def test_synthetic_goal_weights_and_human_goals():
    products, attributes, human = generate_catalog(seed=2, size=150)
    loaded, prices = C.load_products(products, attributes, None, False, random.Random(0))
    goals = make_goals(loaded, prices, False, random.Random(0))
    assert all(0 < g["weight"] <= 1 for g in goals)
    loaded_h, prices_h = C.load_products(products, attributes, human, True, random.Random(0))
    human_goals = make_goals(loaded_h, prices_h, True, random.Random(0))
    n_instructions = sum(1 for v in human.values() for h in v if h["instruction_attributes"])
    assert len(human_goals) == n_instructions and all(isinstance(g["goal_options"], list) for g in human_goals)
    assert all(g["weight"] == 1 for g in human_goals)
    # upstream strips trailing dots from the instruction before appending the price text
    assert not any(g["instruction_text"].split(", and price lower")[0].endswith(".") for g in human_goals)


def test_split_ranges_follow_upstream():
    assert SPLITS == {"test": (0, 500), "eval": (500, 1500), "train": (1500, None)}
    assert split_range("eval", 900) == range(500, 900)
    assert split_range("train", 900) == range(900, 900)


# ------------------------------------------------------------------------------------------ upstream files


def test_price_and_option_parsing():
    assert C.parse_pricing("$12.99") == ([12.99], "$12.99")
    assert C.parse_pricing("$5") == ([5.0], "$5.0")
    assert C.parse_pricing("$10.49 - $18.99") == ([10.49, 18.99], "$10.49 to $18.99")
    assert C.parse_pricing("$1,299.00") == ([1299.0], "$1299.0")
    assert C.parse_pricing("") == ([100.0], "$100.0") and C.parse_pricing(None) == ([100.0], "$100.0")
    raw = {"Color": [{"value": " Black/White ", "image": None}], "Pattern": None}
    assert C.parse_options(raw) == {"color": ["black | white"]}
    assert C.parse_options("") == {}


def test_load_products_skips_bad_and_duplicate_asins():
    base = {"name": "X", "full_description": "", "small_description": "one bullet", "pricing": "$1",
            "images": [], "query": " Mugs ", "category": "food", "product_category": "A › B",
            "customization_options": ""}
    raws = [dict(base, asin="nan"), dict(base, asin="B0TOOLONG123"), dict(base, asin="B000000001"),
            dict(base, asin="B000000001", name="dup")]
    products, prices = C.load_products(raws, {}, None, False, random.Random(0))
    assert [p["asin"] for p in products] == ["B000000001"]
    p = products[0]
    assert p["Title"] == "X" and p["BulletPoints"] == ["one bullet"] and p["query"] == "mugs"
    assert p["Attributes"] == ["DUMMY_ATTR"] and p["instruction_text"] is None and p["MainImage"] is None


def test_shared_attribute_file_verifies():
    path = need_data(SHARED_WEBSHOP / "items_ins_v2_1000.json", "WebShop items_ins_v2_1000.json")
    C.verify_file(path)
    records = json.loads(path.read_text())
    # the spec's figure: 415 of the 1000 upstream products carry a synthetic instruction
    assert len(records) == 1000 and sum(1 for r in records.values() if r.get("instruction")) == 415


def test_folder_without_catalog_falls_back_to_generated(tmp_path, caplog):
    folder = tmp_path / "webshop"
    folder.mkdir()
    source = SHARED_WEBSHOP / "items_ins_v2_1000.json"
    if source.is_file():
        shutil.copy(source, folder / source.name)  # a correct file alone is not a catalog
    assert C.upstream_paths(folder, human_goals=False) is None
    backend = WebShopBackend(data_dir=folder, num_products=50, noun_matcher="fallback")
    assert backend.catalog_info()["source"].startswith("generated:")


def _fake(folder: Path, name: str, content: bytes) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_bytes(content)
    return path


def test_truncated_file_is_a_clear_error(tmp_path):
    _fake(tmp_path, "items_shuffle_1000.json", b"[]")
    with pytest.raises(C.DataIntegrityError) as err:
        C.upstream_paths(tmp_path, human_goals=False)
    message = str(err.value)
    assert "items_shuffle_1000.json" in message and C.UPSTREAM_FILES["items_shuffle_1000.json"][1] in message
    assert "4467013" in message


def test_same_size_wrong_content_is_a_clear_error(tmp_path):
    size, digest = C.UPSTREAM_FILES["items_ins_v2_1000.json"]
    _fake(tmp_path, "items_ins_v2_1000.json", b" " * size)
    with pytest.raises(C.DataIntegrityError, match=digest):
        C.upstream_paths(tmp_path, human_goals=False)
    with pytest.raises(C.DataIntegrityError, match="items_ins_v2_1000.json"):
        WebShopBackend(data_dir=tmp_path, num_products=50).list_tasks("test")


def test_webshop_data_environment_variable_is_the_default(tmp_path, monkeypatch):
    monkeypatch.setenv("WEBSHOP_DATA", str(tmp_path))
    backend = WebShopBackend(num_products=50, noun_matcher="fallback")
    assert backend.config.data_dir == str(tmp_path)
    monkeypatch.delenv("WEBSHOP_DATA")
    assert WebShopBackend().config.data_dir is None


def test_corrupt_json_names_the_file(tmp_path):
    path = _fake(tmp_path, "broken.json", b"{not json")
    with pytest.raises(C.DataIntegrityError, match="broken.json"):
        C._read_json(path)


def test_datatool_verify_and_generate(tmp_path, capsys):
    from skillrise_gym.backends.webshop import datatool

    assert datatool.verify(tmp_path) == 1
    assert "MISSING  items_shuffle_1000.json" in capsys.readouterr().out
    out = tmp_path / "gen"
    assert datatool.generate(out, 30, 0) == 0
    assert json.loads((out / "items_shuffle_30.json").read_text())[0]["asin"].startswith("B0")
    _fake(tmp_path / "bad", "items_ins_v2_1000.json", b"{}")
    assert datatool.verify(tmp_path / "bad") == 1
    assert "BAD      items_ins_v2_1000.json" in capsys.readouterr().out
    if (SHARED_WEBSHOP / "items_ins_v2_1000.json").is_file():
        datatool.verify(SHARED_WEBSHOP)
        assert "OK       items_ins_v2_1000.json" in capsys.readouterr().out


def test_a_data_folder_without_the_catalog_is_said_once_per_process_not_once_per_env(tmp_path, caplog):
    """Every env of a run reads the data folder: the fallback to the generated catalog is one warning."""
    import logging

    from skillrise_gym.backends.webshop import catalog

    caplog.set_level(logging.WARNING)
    for _ in range(3):
        assert catalog.upstream_paths(tmp_path, human_goals=False) is None
    assert caplog.text.count("using a generated catalog instead") == 1
