"""WebShop, re-implemented offline and faithfully (pages, `[SEP]` observations, search, goals, reward).

Only the backend class is exported here; the engine (bm25s, rapidfuzz, optional spaCy) is
imported when a backend is first used.
"""

from skillrise_gym.backends.webshop.backend import WebShopBackend

__all__ = ["WebShopBackend"]
