"""An env module that takes seconds to import: a stand-in for an env worker's imports on a loaded machine
(tests/test_pools.py). A worker unpickles its env functions, so it imports this module before it can start."""

from __future__ import annotations

import time

IMPORT_SECONDS = 4.0
time.sleep(IMPORT_SECONDS)


def make_toy():
    from skillrise_gym.env import SequenceEnv

    return SequenceEnv(backend="toy", K=1)
