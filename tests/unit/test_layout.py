"""The package layout the project promises: config groups and recipes at the top level but packaged, and no
import circles between agentforge's modules (counting imports inside functions and under TYPE_CHECKING: a circle
hidden in a function is still two modules that cannot be understood apart)."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

import agentforge

pytestmark = pytest.mark.unit

PACKAGE = Path(agentforge.__file__).parent
REPO = PACKAGE.parent


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_ancestor(package: str, module: str) -> bool:
    """Importing a module imports its parent packages first anyway: that edge is not a design dependency."""
    return module == package or module.startswith(package + ".")


def import_graph() -> dict[str, set[str]]:
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                           for a in node.names]
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target.startswith("agentforge") and not is_ancestor(target, name):
                    graph[name].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_no_import_circles():
    assert cycles(import_graph()) == []


def test_config_groups_and_recipes_are_top_level_and_packaged():
    import agentforge.conf
    import agentforge.recipes

    assert (REPO / "conf" / "config.yaml").is_file() and (REPO / "recipes" / "gigpo_sokoban.yaml").is_file()
    assert not (PACKAGE / "conf").exists()
    assert Path(agentforge.conf.__file__).parent.joinpath("config.yaml").is_file()
    assert Path(agentforge.recipes.__file__).parent.joinpath("sokoban_demo.yaml").is_file()


def test_top_level_of_the_package_stays_small():
    flat = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__")
    assert len(flat) <= 8, flat


def test_an_installed_wheel_finds_its_config_and_recipes_without_a_checkout(tmp_path):
    """`pip install .` ships conf/ and recipes/ as agentforge.conf and agentforge.recipes: compose a recipe from the
    installed copy alone (python -S skips the editable install's finder; site-packages is added back by path)."""
    source = tmp_path / "source"  # a copy: building in the checkout would leave build/ and *.egg-info behind
    for name in ("agentforge", "conf", "recipes"):
        shutil.copytree(REPO / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy2(REPO / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", str(source),
                    "-w", str(tmp_path / "wheel")], check=True, capture_output=True, cwd=tmp_path)
    wheel = next((tmp_path / "wheel").glob("agentforge-*.whl"))
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(tmp_path / "site"),
                    str(wheel)], check=True, capture_output=True)
    code = ("import agentforge, agentforge.schema.compose as c, agentforge.commands.train, "
            "agentforge.commands.evaluate; "
            "cfg = c.compose_config(['recipe=tjpo_sokoban']); "
            "print(agentforge.__file__, cfg.algorithm.name, cfg.trainer.group_size)")
    env = {"PYTHONPATH": f"{tmp_path / 'site'}:{sysconfig.get_paths()['purelib']}", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-S", "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    where, algorithm, group = out.stdout.split()
    assert where.startswith(str(tmp_path / "site")) and algorithm == "tjpo" and group == "8"
