#!/usr/bin/env python
"""The Rulebook probe's ceilings, computed exactly, written to benchmarks/results/rulebook_ceilings.json.

`RulebookBackend.ceilings(K, split)` gives success by position for an agent that ignores the document (1/N) and
for a perfect curator (exact for the split's families and the sampler's draws); the docs quote them from this
file, and tests/test_rulebook.py checks that the file is what the code computes (so it cannot drift) and that
scripted agents played through `gym.make` reach them.

    python benchmarks/experiments/rulebook_ceilings.py            # rewrite the JSON
    python benchmarks/experiments/rulebook_ceilings.py --check    # exit 1 if the JSON differs from the code
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "benchmarks/results/rulebook_ceilings.json"

#: (rules, bins) settings quoted in the docs: the defaults (R=2, N=4) and the one-rule probe (R=1, N=3)
SETTINGS = ((2, 4), (1, 3))
K = 6


def compute() -> dict:
    from skillrise_gym.backends.rulebook import RulebookBackend

    out: dict = {"what": "success by position (exact) for an agent that ignores the document and for a perfect "
                         "curator, default families, K=6; RulebookBackend.ceilings", "K": K, "settings": []}
    for rules, bins in SETTINGS:
        backend = RulebookBackend(rules=rules, bins=bins)
        for split in ("train", "test"):
            ceilings = backend.ceilings(K, split)
            out["settings"].append({
                "rules": rules, "bins": bins, "split": split,
                "ignore_document": [round(x, 6) for x in ceilings["ignore_document"]],
                "perfect_curator": [round(x, 6) for x in ceilings["perfect_curator"]],
            })
    return out


def main(argv: list[str] | None = None) -> int:
    if str(ROOT) not in sys.path:  # run as a script: the repository, where benchmarks/ is a package
        sys.path.insert(0, str(ROOT))
    from benchmarks.experiments import computed_json

    return computed_json.main(argv, __doc__.split("\n\n")[0], compute, OUT, Path(__file__).name,
                              "RulebookBackend.ceilings")


if __name__ == "__main__":
    sys.exit(main())
