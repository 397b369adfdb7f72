"""Load gym-sokoban's room generator without importing the `gym_sokoban` package.

The package's `__init__` imports old `gym` and `pkg_resources` (gone from current setuptools), but its generator
module `envs/room_utils.py` needs only numpy. So we find the installed package folder without executing it and
load that one file by path.
"""

from __future__ import annotations

import importlib.util
import threading
from pathlib import Path
from types import ModuleType

from agentforge.errors import AgentforgeError

INSTALL_HINT = "pip install --no-deps gym-sokoban==0.0.6"
_MODULE_NAME = "agentforge_gym_sokoban_room_utils"

_lock = threading.Lock()
_room_utils: ModuleType | None = None

# The generator keeps its search state in module globals and draws from the global RNGs, so one generation at a
# time per process; callers hold this lock around seeding + generating + restoring the RNG states.
GENERATOR_LOCK = threading.Lock()


def gym_sokoban_dir() -> Path:
    """The installed `gym_sokoban` package folder (found without running its `__init__`)."""
    try:
        spec = importlib.util.find_spec("gym_sokoban")
    except (ImportError, ValueError) as err:  # pragma: no cover - a broken install
        raise AgentforgeError(f"cannot locate gym-sokoban ({err}); reinstall it with: {INSTALL_HINT}") from err
    if spec is None or not spec.submodule_search_locations:
        raise AgentforgeError(f"the Sokoban env needs gym-sokoban's room generator; install it with: {INSTALL_HINT}")
    return Path(next(iter(spec.submodule_search_locations)))


def room_utils() -> ModuleType:
    """gym-sokoban's `envs/room_utils.py` as a module, loaded once per process."""
    global _room_utils
    with _lock:
        if _room_utils is None:
            path = gym_sokoban_dir() / "envs" / "room_utils.py"
            if not path.is_file():
                raise AgentforgeError(
                    f"gym-sokoban is installed but {path} is missing; reinstall it with: {INSTALL_HINT}"
                )
            spec = importlib.util.spec_from_file_location(_MODULE_NAME, path)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            _room_utils = module
        return _room_utils
