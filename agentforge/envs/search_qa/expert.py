"""A scripted search-QA expert (SFT warm starts, tests): the generator's search queries, then the golden answer.

Only bundled questions carry `expert_queries`; the expert counts only if its searches really retrieve every
supporting passage, so its trajectories never answer without evidence.
"""

from __future__ import annotations

from typing import Any

from agentforge.envs.search_qa.env import SearchQAEnv
from agentforge.types import Task


def expert_actions(task: Task, env_options: dict[str, Any] | None = None) -> list[str] | None:
    env = SearchQAEnv(**(env_options or {}))
    try:
        env.reset(task)
        question = env.question
        if not question.expert_queries or len(question.expert_queries) + 1 > env.max_turns:
            return None
        seen: set[str] = set()
        for query in question.expert_queries:
            result = env.step(f"search[{query}]")
            seen.update(result.info.get("retrieved_ids", []))
        if not set(question.supporting_ids) <= seen:
            return None
        return [*(f"search[{q}]" for q in question.expert_queries), f"answer[{question.golden_answers[0]}]"]
    finally:
        env.close()
