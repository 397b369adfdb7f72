"""Package layout that pyproject.toml alone cannot express: the config groups and recipes live at the top of the
repository (`conf/`, `recipes/`) but install as `agentforge.conf` and `agentforge.recipes`, so a `pip install .`
finds them without a checkout. Everything else is in pyproject.toml."""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["agentforge", "agentforge.*"]), "agentforge.conf", "agentforge.recipes"],
    package_dir={"agentforge.conf": "conf", "agentforge.recipes": "recipes"},
)
