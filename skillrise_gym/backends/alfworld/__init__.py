"""ALFWorld backend: the real alfworld/TextWorld engine, with fast cached resets (see `backend.py`).

Importing this package does not import the engine; making an `ALFWorldBackend` does.
"""

from skillrise_gym.backends.alfworld.backend import EXPERTS, FAMILIES, ALFWorldBackend, task_description_from
from skillrise_gym.backends.alfworld.data import SPLIT_FOLDERS, TASK_TYPES, TaskDirInfo, resolve_data_root

__all__ = [
    "ALFWorldBackend",
    "EXPERTS",
    "FAMILIES",
    "SPLIT_FOLDERS",
    "TASK_TYPES",
    "TaskDirInfo",
    "resolve_data_root",
    "task_description_from",
]
