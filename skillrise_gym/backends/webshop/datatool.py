"""WebShop data: how to get the upstream files, verify a folder, or write a generated catalog.

    skillrise-data webshop                      # where the data is looked for and how to obtain it
    skillrise-data webshop --verify DIR         # check sizes and SHA-256 of the upstream files in DIR
    skillrise-data webshop --generate OUT [--num-products N] [--seed S]
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from skillrise_gym.backends.webshop.catalog import UPSTREAM_FILES
from skillrise_gym.paths import sha256_file

HOW_TO_GET = """\
The upstream WebShop "small" catalog is three JSON files, distributed by princeton-nlp/WebShop
(https://github.com/princeton-nlp/WebShop): its `setup.sh -d small` downloads them into `data/`.
Copy them into one folder and point WEBSHOP_DATA at it (or pass backend_options={{"data_dir": ...}}):

{table}
Without them the backend generates its own catalog in the same format (deterministic from
catalog_seed and num_products) and caches it under $SKILLRISE_CACHE/webshop/.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--verify", metavar="DIR", help="verify the upstream files in DIR (sizes and SHA-256)")
    parser.add_argument("--generate", metavar="OUT", help="write a generated catalog (three JSON files) into OUT")
    parser.add_argument("--num-products", type=int, default=1000, help="generated catalog size (default 1000)")
    parser.add_argument("--seed", type=int, default=0, help="generated catalog seed (default 0)")


def _table() -> str:
    return "".join(f"  {name:<26} {size:>9} bytes  sha256 {digest}\n" for name, (size, digest) in UPSTREAM_FILES.items())


def verify(folder: Path) -> int:
    """Print one line per upstream file; 0 when the catalog files (products + attributes) are all good."""
    if not folder.is_dir():
        print(f"{folder}: not a folder")
        return 1
    status = 0
    for name, (size, digest) in UPSTREAM_FILES.items():
        path = folder / name
        needed = name != "items_human_ins.json"
        if not path.is_file():
            print(f"MISSING  {name}" + ("" if needed else " (only needed for human_goals=True)"))
            status |= int(needed)
            continue
        actual_size = path.stat().st_size
        if actual_size != size:
            print(f"BAD      {name}: {actual_size} bytes, expected {size} (sha256 {digest})")
            status = 1
            continue
        actual = sha256_file(path)
        if actual != digest:
            print(f"BAD      {name}: sha256 {actual}, expected {digest}")
            status = 1
        else:
            print(f"OK       {name}")
    print("verdict: " + ("usable upstream catalog" if status == 0 else "not usable; the backend would generate a catalog"
                         " (or fail on a wrong file)"))
    return status


def generate(out: Path, num_products: int, seed: int) -> int:
    from skillrise_gym.backends.webshop.generator import write_catalog

    if out.exists() and any((out / name).exists() for name in UPSTREAM_FILES):
        print(f"{out} already holds WebShop files; refusing to overwrite them")
        return 1
    paths = write_catalog(out, seed=seed, size=num_products)
    for path in paths.values():
        print(f"wrote {path} ({path.stat().st_size} bytes)")
    return 0


def run(args: argparse.Namespace) -> int:
    if args.verify:
        return verify(Path(args.verify).expanduser())
    if args.generate:
        return generate(Path(args.generate).expanduser(), args.num_products, args.seed)
    print(HOW_TO_GET.format(table=_table()))
    env = os.environ.get("WEBSHOP_DATA")
    if env:
        print(f"WEBSHOP_DATA={env}")
        return verify(Path(env).expanduser())
    print("WEBSHOP_DATA is not set: the backend will use a generated catalog.")
    return 0
