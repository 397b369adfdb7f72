"""The search-QA task as tools, shared by the example agents: `search(query)` over the bundled corpus (BM25) and
`answer(answer)`, both executed by the task's own env so its verifier scores the answer (exact match)."""

from __future__ import annotations

import json
from typing import Any

SYSTEM = ("You answer questions about a world you do not know, using a search engine over its encyclopedia. Call "
          "`search` for the entities the question names, then call `answer` with the shortest exact name, year or "
          "number.")
TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {
        "name": "search", "description": "Search the encyclopedia; returns the best matching passages.",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}},
    {"type": "function", "function": {
        "name": "answer", "description": "Give the final answer and end the episode.",
        "parameters": {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}}},
]


class SearchTask:
    """One episode's env behind the tools: `call(name, arguments)` → (tool output text, done, reward, won)."""

    def __init__(self, agent_task: Any) -> None:
        self.env = agent_task.make_env()
        self.question = self.env.reset(agent_task.task).text
        self.reward, self.won, self.done = 0.0, False, False

    def call(self, name: str, arguments: str | dict[str, Any]) -> str:
        try:
            args = json.loads(arguments) if isinstance(arguments, str) else dict(arguments)
        except json.JSONDecodeError:
            args = {}
        key = {"search": "query", "answer": "answer"}.get(name)
        if key is None:
            return f"unknown tool {name!r}; use search or answer"
        if not isinstance(args.get(key), str) or not args[key].strip():
            return f"{name} takes {{\"{key}\": <string>}}; got {json.dumps(args, ensure_ascii=False)}"  # no env step
        return self.step(f"{name}[{args[key]}]")

    def answer_text(self, text: str) -> str:
        """A reply without tool calls is read as the final answer."""
        return self.step(f"answer[{text.strip()[:200]}]")

    def step(self, action: str) -> str:
        result = self.env.step(action)
        self.reward += result.reward
        self.won = self.won or result.won
        self.done = result.done
        return result.observation.text

    def outcome(self) -> dict[str, Any]:
        return {"reward": self.reward, "won": self.won}


def expert(task: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The search-QA expert as tool calls, for the tool-format warm start (`env.expert`): its searches, then the
    golden answer, one call per model call. None (no reply) for questions the expert cannot solve or agents that do
    not offer these tools."""
    from agentforge.envs.search_qa.expert import expert_actions
    from agentforge.gateway.expert import tool_call

    offered = {t["function"]["name"] for t in tools}
    actions = expert_actions(task.task, task.env_options)
    step = sum(m["role"] == "assistant" for m in messages)
    if not actions or step >= len(actions) or not {"search", "answer"} <= offered:
        return None
    kind, _, argument = actions[step].partition("[")
    argument = argument[:-1]
    return {"tool_calls": [tool_call("search", query=argument) if kind == "search"
                           else tool_call("answer", answer=argument)]}
