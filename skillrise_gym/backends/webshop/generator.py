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

Everything comes from one ``random.Random(seed)`` and the built-in vocabulary below, so a (seed, size) pair
always yields the same bytes. The vocabulary is the project's own, written to look like the upstream
Amazon scrape: the five top-level categories, product-category paths joined with ' › ', typed attributes
("long lasting", "with tea tree", "for dry skin"), option groups and a sprinkle of the values that hit
upstream's reward quirks (substring colour matching: "standard" -> "tan", "peppermint" -> "mint").
"""

from __future__ import annotations

import json
import random
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: bump when the generator's output changes, so cached catalogs are rebuilt
GENERATOR_VERSION = 1

# ----------------------------------------------------------------------------------------------------
# Vocabulary
# ----------------------------------------------------------------------------------------------------

#: top-level category -> root of its product-category path
ROOTS = {
    "beauty": "Beauty & Personal Care",
    "electronics": "Electronics",
    "fashion": "Clothing, Shoes & Jewelry",
    "food": "Grocery & Gourmet Food",
    "furniture": "Home & Kitchen",
}

#: colour values as they appear in option lists (some compound, one with '/', a few quirky ones)
COLORS = [
    "black", "white", "navy blue", "light grey", "dark grey", "red", "wine red", "pink", "rose gold",
    "beige", "khaki", "brown", "dark brown", "army green", "olive", "sky blue", "royal blue", "purple",
    "lavender", "yellow", "mustard", "orange", "coral", "teal", "ivory", "silver", "gold", "charcoal",
    "black/white", "multicolor", "camel", "burgundy", "mint green", "clear",
]
#: option values that upstream's substring colour normalisation mangles (kept rare on purpose)
QUIRKY_STYLES = ["standard", "washable"]
QUIRKY_FLAVORS = ["peppermint"]

APPAREL_SIZES = ["x-small", "small", "medium", "large", "x-large", "xx-large", "3x-large"]
SHOE_SIZES = ["6", "6.5", "7", "7.5", "8", "8.5", "9", "9.5", "10", "10.5", "11", "12", "7.5 wide", "9 wide"]
VOLUME_SIZES = ["1 fl oz (pack of 1)", "2 fl oz (pack of 1)", "3.4 fl oz", "4 ounce", "8 ounce", "16 ounce",
                "2 count", "3 pack", "6.7 fl oz (pack of 2)"]
FOOD_SIZES = ["8 ounce (pack of 1)", "12 ounce (pack of 6)", "1 pound (pack of 1)", "2 pound", "24 count",
              "5.3 ounce (pack of 12)", "16 ounce (pack of 2)", "3.5 ounce (pack of 4)"]
CAPACITIES = ["32gb", "64gb", "128gb", "256gb", "512gb", "1tb"]
LENGTHS = ["3.3ft", "6ft", "10ft", "1 pack", "2 pack", "3 pack"]
FLAVORS = ["original", "vanilla", "chocolate", "strawberry", "sea salt", "honey", "cinnamon", "caramel",
           "lemon", "mango", "raspberry", "coconut", "matcha", "mixed berry", "dark chocolate", "hazelnut"]
SCENTS = ["lavender", "unscented", "vanilla", "citrus", "eucalyptus", "coconut", "jasmine", "sandalwood",
          "fresh", "ocean breeze"]
STYLES = ["modern", "classic", "rustic", "mid century", "farmhouse", "industrial", "boho", "minimalist"]
MATERIALS = ["oak", "walnut", "pine", "metal", "velvet", "linen", "leather", "bamboo"]

WOOD_COLORS = ["walnut", "oak", "black", "white", "rustic brown", "espresso", "grey", "natural", "cherry",
               "white oak", "dark brown", "light grey"]
BED_SIZES = ["twin", "twin xl", "full", "queen", "king", "california king"]
DESK_SIZES = ["32 inch", "40 inch", "47 inch", "55 inch", "63 inch", "71 inch"]
PILLOW_SIZES = ["16 x 16 inch", "18 x 18 inch", "20 x 20 inch", "24 x 24 inch", "12 x 20 inch"]
ART_SIZES = ["12 x 16 inch", "16 x 24 inch", "24 x 36 inch", "30 x 40 inch", "36 x 48 inch"]

#: option group templates: group name -> value pool and (min, max) values offered per product
OPTION_TEMPLATES: dict[str, list[tuple[str, list[str], tuple[int, int]]]] = {
    "apparel": [("Color", COLORS, (2, 9)), ("Size", APPAREL_SIZES, (3, 7))],
    "shoes": [("Color", COLORS, (1, 5)), ("Size", SHOE_SIZES, (4, 10))],
    "jewelry": [("Color", ["gold", "silver", "rose gold", "black", "white gold"], (1, 4)),
                ("Size", ["6", "7", "8", "9", "one size", "16 inch", "18 inch", "20 inch"], (1, 4))],
    "beauty": [("Size", VOLUME_SIZES, (1, 4)), ("Scent", SCENTS, (1, 4))],
    "makeup": [("Color", COLORS, (2, 10))],
    "hairtool": [("Color", COLORS, (1, 4)), ("Style", ["us plug", "eu plug", "uk plug"] + QUIRKY_STYLES, (1, 2))],
    "food": [("Flavor Name", FLAVORS + QUIRKY_FLAVORS, (1, 6)), ("Size", FOOD_SIZES, (1, 4))],
    "electronics": [("Color", COLORS, (1, 5)), ("Capacity", CAPACITIES, (1, 4))],
    "cable": [("Color", COLORS, (1, 4)), ("Size", LENGTHS, (1, 4))],
    "device": [("Color", COLORS, (1, 4)),
               ("Style", ["basic", "with case", "with charger", "bundle", "2 pack"] + QUIRKY_STYLES, (1, 3))],
    "bed": [("Color", WOOD_COLORS, (1, 4)), ("Size", BED_SIZES, (2, 5))],
    "sheets": [("Color", COLORS, (2, 8)), ("Size", BED_SIZES, (2, 6))],
    "desk": [("Color", WOOD_COLORS, (1, 5)), ("Size", DESK_SIZES, (1, 4))],
    "chair": [("Color", COLORS, (2, 7)), ("Style", STYLES + MATERIALS, (1, 2))],
    "pillow": [("Color", COLORS, (2, 8)), ("Size", PILLOW_SIZES, (1, 4))],
    "wallart": [("Color", ["black and white", "blue", "green", "multicolor", "gold", "grey"], (1, 3)),
                ("Size", ART_SIZES, (2, 4))],
    "lamp": [("Color", COLORS, (1, 4)), ("Style", ["with usb port", "set of 2", "classic", "dimmable bulb"], (1, 2))],
    "none": [],
}

#: category-wide attributes: (phrase, kind) with kind "adj" (before the type), "with" or "for" (after it)
CATEGORY_ATTRS: dict[str, list[tuple[str, str]]] = {
    "beauty": [("cruelty free", "adj"), ("paraben free", "adj"), ("long lasting", "adj"), ("easy use", "adj"),
               ("high quality", "adj"), ("travel size", "adj"), ("natural ingredients", "with"),
               ("sensitive skin", "for"), ("dermatologist tested", "adj"), ("easy carry", "adj")],
    "electronics": [("high speed", "adj"), ("easy install", "adj"), ("plug play", "adj"), ("high definition", "adj"),
                    ("heavy duty", "adj"), ("usb port", "with"), ("remote control", "with"), ("home theater", "for"),
                    ("easy use", "adj"), ("light weight", "adj")],
    "fashion": [("machine wash", "adj"), ("hand wash", "adj"), ("slim fit", "adj"), ("classic fit", "adj"),
                ("daily wear", "for"), ("loose fit", "adj"), ("high quality", "adj"), ("polyester spandex", "with"),
                ("button closure", "with"), ("elastic waist", "with")],
    "food": [("gluten free", "adj"), ("non gmo", "adj"), ("plant based", "adj"), ("low carb", "adj"),
             ("sugar free", "adj"), ("certified organic", "adj"), ("natural ingredients", "with"),
             ("high protein", "adj"), ("individually wrapped", "adj"), ("ready eat", "adj")],
    "furniture": [("living room", "for"), ("easy clean", "adj"), ("easy assemble", "adj"), ("assembly required", "adj"),
                  ("solid wood", "with"), ("metal frame", "with"), ("home office", "for"), ("dining room", "for"),
                  ("space saving", "adj"), ("mid century", "adj")],
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


def _t(category: str, path: str, noun: str, queries: str, attrs: str, options: str, price: tuple[float, float]) -> ProductType:
    """Compact constructor: '/'-separated path, '|'-separated queries, 'phrase:kind' attributes by ';'."""
    parsed = tuple((a.split(":")[0].strip(), a.split(":")[1].strip()) for a in attrs.split(";") if a.strip())
    return ProductType(category, tuple(path.split("/")), noun, tuple(queries.split("|")), parsed, options, price)


PRODUCT_TYPES: list[ProductType] = [
    # beauty
    _t("beauty", "Skin Care/Body/Moisturizers/Body Butters", "Body Butter", "body butter|shea body butter",
       "shea butter:with;dry skin:for;fragrance free:adj;coconut oil:with", "beauty", (8, 30)),
    _t("beauty", "Skin Care/Body/Scrubs & Body Treatments", "Body Scrub", "body scrub|exfoliating body scrub",
       "dead skin:for;tea tree:with;sea salt:with;oil free:adj", "beauty", (9, 35)),
    _t("beauty", "Hair Care/Hair Loss Products", "Hair Growth Serum", "hair growth serum|hair loss treatment",
       "hair loss:for;hair growth:for;argan oil:with;dry hair:for", "beauty", (12, 45)),
    _t("beauty", "Hair Care/Styling Tools & Appliances/Hair Dryers", "Hair Dryer", "hair dryer|ionic hair dryer",
       "hair styling:for;ionic technology:with;fast drying:adj;low noise:adj", "hairtool", (25, 120)),
    _t("beauty", "Makeup/Lips/Lipstick", "Matte Lipstick", "matte lipstick|long lasting lipstick",
       "easy apply:adj;waterproof:adj;vitamin e:with;nude lips:for", "makeup", (6, 25)),
    _t("beauty", "Makeup/Eyes/Eyeshadow Palettes", "Eyeshadow Palette", "eyeshadow palette|shimmer eyeshadow",
       "eye shadow:for;highly pigmented:adj;shimmer matte:with;easy blend:adj", "makeup", (9, 40)),
    _t("beauty", "Tools & Accessories/Makeup Brushes & Tools", "Makeup Brush Set", "makeup brush set|makeup brushes",
       "synthetic hair:with;eye shadow:for;soft bristles:with;storage case:with", "makeup", (7, 30)),
    _t("beauty", "Oral Care/Toothpaste", "Whitening Toothpaste", "whitening toothpaste|fluoride free toothpaste",
       "teeth whitening:for;fresh breath:for;fluoride free:adj;bad breath:for", "beauty", (4, 18)),
    _t("beauty", "Fragrance/Women's/Eau de Parfum", "Eau de Parfum", "perfume for women|eau de parfum",
       "long lasting:adj;floral scent:with;gift set:adj;alcohol free:adj", "beauty", (20, 95)),
    _t("beauty", "Shave & Hair Removal/Men's/Electric Shavers", "Electric Shaver", "electric shaver|electric razor men",
       "stainless steel:with;cordless:adj;hair removal:for;waterproof:adj", "hairtool", (25, 110)),
    # electronics
    _t("electronics", "Headphones, Earbuds & Accessories/Earbud Headphones", "Wireless Earbuds",
       "wireless earbuds|bluetooth earbuds", "wireless bluetooth:adj;noise cancelling:adj;charging case:with;hands free:adj",
       "electronics", (15, 120)),
    _t("electronics", "Portable Audio & Video/Bluetooth Speakers", "Bluetooth Speaker",
       "bluetooth speaker|portable speaker", "wireless bluetooth:adj;waterproof:adj;long battery:with;outdoor party:for",
       "electronics", (18, 150)),
    _t("electronics", "Computers & Accessories/Data Storage/USB Flash Drives", "USB Flash Drive",
       "usb flash drive|thumb drive", "high speed:adj;usb 3.0:with;data storage:for;metal casing:with", "electronics", (6, 45)),
    _t("electronics", "Accessories & Supplies/Audio & Video Accessories/Cables/HDMI Cables", "HDMI Cable",
       "hdmi cable|4k hdmi cable", "high speed:adj;4k hdr:with;gold plated:adj;braided cord:with", "cable", (5, 25)),
    _t("electronics", "Cell Phones & Accessories/Screen Protectors", "Screen Protector",
       "screen protector|tempered glass screen protector", "tempered glass:with;bubble free:adj;case friendly:adj;touch screen:for",
       "device", (5, 20)),
    _t("electronics", "Television & Video/Remote Controls", "Replacement Remote Control",
       "replacement remote|tv remote", "replacement remote:adj;smart tv:for;no setup:adj;aaa batteries:with", "device", (6, 25)),
    _t("electronics", "Camera & Photo/Tripods & Monopods", "Phone Tripod", "phone tripod|camera tripod stand",
       "light weight:adj;bluetooth remote:with;live streaming:for;extendable:adj", "device", (12, 60)),
    _t("electronics", "Computers & Accessories/Keyboards, Mice & Accessories/Mice", "Wireless Mouse",
       "wireless mouse|ergonomic mouse", "ergonomic design:adj;silent click:adj;usb receiver:with;laptop pc:for",
       "electronics", (8, 40)),
    _t("electronics", "Home Audio/Home Theater Systems/Sound Bars", "Sound Bar", "sound bar|tv soundbar",
       "home theater:for;optical input:with;wall mounted:adj;surround sound:with", "electronics", (40, 250)),
    # fashion
    _t("fashion", "Women/Clothing/Tops, Tees & Blouses/T-Shirts", "T-Shirt", "womens t shirt|graphic tees women",
       "short sleeve:adj;cotton heather:with;crew neck:adj;teen girls:for", "apparel", (9, 30)),
    _t("fashion", "Men/Clothing/Shirts/Casual Button-Down Shirts", "Button Down Shirt", "mens shirts|button down shirt men",
       "long sleeve:adj;regular fit:adj;cotton blend:with;business casual:for", "apparel", (15, 45)),
    _t("fashion", "Women/Clothing/Active/Active Pants/Yoga Pants", "Yoga Pants", "yoga pants|high waist leggings",
       "high waist:adj;tummy control:adj;gym workout:for;moisture wicking:adj", "apparel", (12, 40)),
    _t("fashion", "Women/Clothing/Dresses/Casual", "Summer Dress", "summer dress|casual dress women",
       "short sleeve:adj;flowy hem:with;beach vacation:for;v neck:adj", "apparel", (15, 50)),
    _t("fashion", "Men/Shoes/Athletic/Running", "Running Shoes", "running shoes men|athletic sneakers",
       "rubber sole:with;non slip:adj;arch support:with;breathable mesh:with", "shoes", (30, 110)),
    _t("fashion", "Women/Shoes/Sandals/Flat Sandals", "Flat Sandals", "flat sandals|sandals women",
       "open toe:adj;rubber outsole:with;arch support:with;summer beach:for", "shoes", (15, 60)),
    _t("fashion", "Women/Shoes/Slippers", "Memory Foam Slippers", "slippers women|memory foam slippers",
       "memory foam:with;non slip:adj;indoor outdoor:for;faux fur:with", "shoes", (10, 35)),
    _t("fashion", "Women/Jewelry/Necklaces/Pendants", "Pendant Necklace", "pendant necklace|necklace for women",
       "sterling silver:with;gift box:with;hypoallergenic:adj;anniversary birthday:for", "jewelry", (12, 80)),
    _t("fashion", "Men/Accessories/Belts", "Leather Belt", "leather belt men|dress belt",
       "genuine leather:with;adjustable:adj;automatic buckle:with;business dress:for", "apparel", (12, 45)),
    # food
    _t("food", "Snack Foods/Chips & Crisps", "Kettle Cooked Potato Chips", "potato chips|kettle chips",
       "gluten free:adj;sea salt:with;non gmo:adj;snack pack:for", "food", (3, 25)),
    _t("food", "Beverages/Coffee, Tea & Cocoa/Coffee/Ground Coffee", "Ground Coffee", "ground coffee|dark roast coffee",
       "medium roast:adj;arabica beans:with;fair trade:adj;french press:for", "food", (8, 35)),
    _t("food", "Beverages/Coffee, Tea & Cocoa/Tea/Green Tea", "Green Tea Bags", "green tea|green tea bags",
       "caffeine free:adj;antioxidant rich:adj;individually wrapped:adj;weight loss:for", "food", (4, 22)),
    _t("food", "Candy & Chocolate/Chocolate Bars", "Chocolate Bar", "chocolate bar|dark chocolate bar",
       "milk chocolate:with;fair trade:adj;gift basket:for;low sugar:adj", "food", (3, 30)),
    _t("food", "Pantry Staples/Jams, Jellies & Sweet Spreads/Nut Butters", "Almond Butter",
       "almond butter|nut butter", "no sugar added:adj;keto friendly:adj;roasted almonds:with;squeeze pack:with", "food", (6, 28)),
    _t("food", "Snack Foods/Bars/Protein Bars", "Protein Bar", "protein bar|high protein snack bar",
       "high protein:adj;low carb:adj;whey protein:with;post workout:for", "food", (10, 40)),
    _t("food", "Breakfast Foods/Cereals/Granola", "Granola", "granola|organic granola",
       "whole grain:with;low sugar:adj;dried fruit:with;vegan friendly:adj", "food", (5, 25)),
    _t("food", "Pantry Staples/Herbs, Spices & Seasonings/Seasoning Mixes", "Seasoning Blend",
       "seasoning blend|spice mix", "salt free:adj;all natural:adj;bbq grill:for;msg free:adj", "food", (4, 20)),
    # furniture / home
    _t("furniture", "Furniture/Living Room Furniture/Tables/Coffee Tables", "Coffee Table", "coffee table|living room table",
       "living room:for;storage shelf:with;solid wood:with;easy assemble:adj", "desk", (60, 300)),
    _t("furniture", "Furniture/Bedroom Furniture/Beds, Frames & Bases/Bed Frames", "Platform Bed Frame",
       "bed frame|platform bed frame", "box spring:with;metal frame:with;noise free:adj;under bed storage:with",
       "bed", (90, 450)),
    _t("furniture", "Furniture/Home Office Furniture/Desks", "Computer Desk", "computer desk|home office desk",
       "home office:for;writing study:for;steel frame:with;space saving:adj", "desk", (70, 320)),
    _t("furniture", "Furniture/Living Room Furniture/Chairs/Accent Chairs", "Accent Chair", "accent chair|armchair living room",
       "living room:for;velvet fabric:with;wood legs:with;mid century:adj", "chair", (80, 380)),
    _t("furniture", "Home Décor Products/Pillows, Inserts & Covers/Throw Pillow Covers", "Throw Pillow Cover",
       "throw pillow covers|decorative pillow covers", "throw pillow:for;hidden zipper:with;machine washable:adj;living room:for",
       "pillow", (8, 30)),
    _t("furniture", "Wall Décor/Posters & Prints", "Canvas Wall Art", "wall art|canvas wall art",
       "wall art:adj;ready hang:adj;living room:for;bedroom bathroom:for", "wallart", (15, 90)),
    _t("furniture", "Lighting & Ceiling Fans/Lamps & Shades/Table Lamps", "Table Lamp", "table lamp|bedside lamp",
       "glass shade:with;usb port:with;dimmable:adj;bedside nightstand:for", "lamp", (18, 90)),
    _t("furniture", "Bedding/Sheets & Pillowcases/Sheet & Pillowcase Sets", "Sheet Set", "bed sheets|sheet set queen",
       "deep pocket:with;microfiber:with;wrinkle free:adj;machine washable:adj", "sheets", (20, 90)),
    _t("furniture", "Storage & Organization/Clothing & Closet Storage/Shoe Organizers", "Shoe Rack", "shoe rack|shoe organizer",
       "space saving:adj;easy assemble:adj;entryway closet:for;metal frame:with", "none", (15, 70)),
]

BRAND_HEADS = ["Al", "Bel", "Cor", "Dav", "El", "Fen", "Gal", "Hol", "Ivo", "Jun", "Kel", "Lum", "Mor", "Nor",
               "Or", "Pel", "Quin", "Ros", "Sol", "Tav", "Ul", "Ver", "Wil", "Xan", "Yar", "Zel"]
BRAND_TAILS = ["ora", "ex", "ify", "ana", "ix", "ton", "mere", "vale", "wick", "ori", "bury", "ella", "ux", "ia"]
TITLE_SUFFIXES = ["", "", "", "for Women", "for Men", "- Gift Idea", "(Pack of 2)", "- Premium Quality", "Set",
                  "with Gift Box", "- Upgraded Version"]
DESCRIPTION_TEMPLATES = [
    "The {brand} {noun} is designed for everyday use and built to last.",
    "Made with {attr}, it is a reliable choice for {use}.",
    "Our {noun_l} combines {attr} and {attr2} in one thoughtful design.",
    "Customers love it because it is {adj} and easy to care for.",
    "Each order ships in recyclable packaging and comes with a 30-day satisfaction guarantee.",
    "Perfect as a gift for family and friends, or as a treat for yourself.",
    "Please allow slight differences in color due to lighting and monitor settings.",
    "Backed by {brand} customer support: contact us with any question about your {noun_l}.",
]
BULLET_TEMPLATES = [
    "{ATTR}: {noun} made with {attr} for lasting comfort and performance",
    "EASY TO USE: simple, practical design suitable for {use}",
    "QUALITY YOU CAN TRUST: {adj} materials carefully checked before shipping",
    "WHAT YOU GET: 1 x {brand} {noun}, user guide, and friendly customer service",
    "GREAT GIFT: an ideal present for birthdays, holidays and special occasions",
]
HUMAN_TEMPLATES = [
    "i am looking for {a_adj} {noun_l}{with_opts}",
    "i need {a_adj} {noun_l} that is {attr_text}{with_opts}",
    "im looking for a {noun_l} with {attr_text}{with_opts}",
    "find me {a_adj} {noun_l} for {attr_text}{with_opts}",
    "i would like to buy {a_adj} {noun_l}{with_opts}",
]


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
