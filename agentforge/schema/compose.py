"""Compose agentforge's Hydra config, and find the recipes it can use.

The config groups live in the top-level `conf/` (packaged as `agentforge.conf`). Recipes live in the top-level
`recipes/` (packaged as `agentforge.recipes`), in any folder named by `$AGENTFORGE_RECIPES` (folders separated by
`os.pathsep`), or in a single file given as `recipe=path/to/my_recipe.yaml`. Every recipe is registered in Hydra's
ConfigStore as an option of the `recipe` group, so `recipe=<file stem>` works from any of them and one recipe may
extend another by name (`defaults: [gigpo_sokoban, _self_]`). A recipe always configures the whole config
(`# @package _global_`, written or not). A user's recipe with a bundled recipe's name replaces it.
"""

from __future__ import annotations

import functools
import os
import tempfile
import time
import uuid
import warnings
from collections.abc import Iterable
from pathlib import Path

from hydra import compose, initialize_config_module
from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf, open_dict

from agentforge.errors import ConfigError
from agentforge.hardware import SlowDtypeWarning, resolve_config_dtypes

CONFIG_MODULE = "agentforge.conf"
RECIPES_ENV = "AGENTFORGE_RECIPES"


def bundled_recipe_dir() -> Path:
    import agentforge.recipes

    return Path(agentforge.recipes.__file__).parent


def recipe_dirs() -> list[Path]:
    """Where recipes are looked for, in order (a later folder's recipe replaces an earlier one of the same name)."""
    extra = [Path(p).expanduser() for p in os.environ.get(RECIPES_ENV, "").split(os.pathsep) if p.strip()]
    missing = [str(p) for p in extra if not p.is_dir()]
    if missing:
        raise ConfigError(f"${RECIPES_ENV} names {', '.join(missing)}, which is not a folder; point it at folders "
                          f"of recipe .yaml files (separated by {os.pathsep!r})")
    return [bundled_recipe_dir(), *extra]


def available_recipes() -> dict[str, Path]:
    """Recipe name -> file, over every recipe folder."""
    found: dict[str, Path] = {}
    for folder in recipe_dirs():
        for path in sorted(folder.glob("*.yaml")):
            found[path.stem] = path
    return found


def register_recipes(files: Iterable[Path] = ()) -> dict[str, Path]:
    """Put every recipe (and the extra `files`) into Hydra's ConfigStore under the `recipe` group."""
    from agentforge.schema.store import register_schemas

    register_schemas()  # the engines', envs' and algorithms' schema defaults, under schema/<group>/<option>
    recipes = available_recipes()
    recipes.update({Path(f).stem: Path(f) for f in files})
    store = ConfigStore.instance()
    for name, path in recipes.items():
        stat = path.stat()
        version = (str(path), stat.st_mtime_ns, stat.st_size)
        if _registered.get(name) == version:
            continue  # already in the store as this file's version: storing it again was a quarter of a compose
        store.store(group="recipe", name=name, node=_load_recipe(*version), package="_global_", provider="agentforge")
        _registered[name] = version
    return recipes


_registered: dict[str, tuple[str, int, int]] = {}  # recipe name -> (file, mtime, size) as last put in the store


def registered_recipes() -> tuple[tuple[str, tuple[str, int, int]], ...]:
    """What the store's `recipe` group holds, by file version: equal values compose equal configs."""
    return tuple(sorted(_registered.items()))


@functools.lru_cache(maxsize=512)
def _load_recipe(path: str, mtime_ns: int, size: int) -> DictConfig:
    """A recipe file parsed once per version of it: every compose registers all recipes, and parsing ~50 YAML files
    was half of a compose's time (0.34 -> 0.17 s measured; most tests compose configs). Hydra's store keeps its
    own copy."""
    try:
        return OmegaConf.load(path)
    except Exception as error:
        raise ConfigError(f"recipe {path} is not valid YAML: {error}") from error


def recipe_file_override(overrides: list[str]) -> tuple[list[str], list[Path]]:
    """`recipe=path/to/file.yaml` -> `recipe=file` plus the file to register (a recipe outside any recipe folder)."""
    out, files = [], []
    for item in overrides:
        key, sep, value = item.partition("=")
        if sep and key.lstrip("+~") == "recipe" and value.endswith((".yaml", ".yml")):
            path = Path(value).expanduser()
            if not path.is_file():
                raise ConfigError(f"recipe file {value} does not exist; give an existing .yaml file or a recipe name")
            files.append(path.resolve())
            item = f"{key}={path.stem}"
        out.append(item)
    return out, files


def fresh_run_dir() -> str:
    """A new run folder's path in the temp dir, not created: a command that writes a run creates it
    (`builders.prepare_run_dir`), so composing a config only to read it leaves no empty folder behind."""
    return str(Path(tempfile.gettempdir()) / f"agentforge-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:8]}")


def compose_config(overrides: list[str] | None = None, run_dir: str | None = None) -> DictConfig:
    """The same config `agentforge <command> <overrides>` would run with; `run_dir` replaces Hydra's output dir.
    Dtypes come back resolved (`auto` -> bfloat16 or float32 for this machine), as the CLI resolves them."""
    overrides, files = recipe_file_override(list(overrides or []))
    register_recipes(files)
    with initialize_config_module(config_module=CONFIG_MODULE, version_base=None):
        cfg = compose(config_name="config", overrides=overrides)
    with open_dict(cfg):
        cfg.run_dir = run_dir or fresh_run_dir()
    for message in resolve_config_dtypes(cfg).warnings:
        warnings.warn(message, SlowDtypeWarning, stacklevel=2)
    return cfg
