"""ScienceWorld on the real simulator (the `scienceworld` package's JVM via py4j).

Importing this package does not import the engine; the JVM starts at the first task.
"""

from skillrise_gym.backends.scienceworld.backend import ScienceWorldBackend

__all__ = ["ScienceWorldBackend"]
