"""WebShop as an offline text env: the original's pages, actions and reward over a generated catalog.

Importing this package registers `webshop` in `ENVS`; the catalog and its BM25 index load on first use.
"""

from __future__ import annotations

from agentforge.envs.webshop.env import WebShopEnv, parse_action

__all__ = ["WebShopEnv", "parse_action"]
