"""Search QA over a local BM25 index (Search-R1 style); importing registers `search_qa` in `ENVS`.

The corpus, questions and index load on first use and are shared by every env of the process.
"""

from __future__ import annotations

from agentforge.envs.search_qa.answer import exact_match, normalize_answer
from agentforge.envs.search_qa.env import SearchQAEnv, parse_action

__all__ = ["SearchQAEnv", "exact_match", "normalize_answer", "parse_action"]
