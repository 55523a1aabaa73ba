"""Backward-compatible alias: `RayEnvPool` and the Ray helpers moved to `skillrise_gym.pools.ray`.

This module re-exports their names, so ``from skillrise_gym.ray_pool import RayEnvPool, check_settings,
connect`` keeps working; new code imports them from `skillrise_gym.pools` (`skillrise_gym.pools.ray` for the
helpers). The constants here are copies: to change one (or patch a helper, in tests), set it on
`skillrise_gym.pools.ray`.
"""

from __future__ import annotations

from skillrise_gym.pools.ray import (ADDRESS_HINT, ANSWER_TIMEOUT, CLOSE_TIMEOUT, CONNECT_TIMEOUT, DEFAULT_TIMEOUT,
                                     GCS_PROBE_METHOD, LOCAL_OBJECT_STORE_BYTES, RayEnvPool, check_placement,
                                     check_settings, connect, identify, import_ray, require_client)

__all__ = ["ADDRESS_HINT", "ANSWER_TIMEOUT", "CLOSE_TIMEOUT", "CONNECT_TIMEOUT", "DEFAULT_TIMEOUT", "GCS_PROBE_METHOD",
           "LOCAL_OBJECT_STORE_BYTES", "RayEnvPool", "check_placement", "check_settings", "connect", "identify",
           "import_ray", "require_client"]
