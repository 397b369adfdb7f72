"""The example agents' search-QA tools and expert, on the real search-QA env (its bundled corpus)."""

from __future__ import annotations

import json

import pytest

from agentforge.gateway.agent_env import AgentTask
from agentforge.gateway.examples.search_tools import TOOLS, SearchTask, expert
from agentforge.types import Task

pytestmark = pytest.mark.unit


def agent_task(seed: int = 0) -> AgentTask:
    return AgentTask(Task("agent", seed), "s", 0, "search_qa", {})


def test_a_tool_call_missing_its_argument_is_told_so_without_spending_a_turn():
    episode = SearchTask(agent_task())
    assert episode.call("answer", '{"query": "x"}') == 'answer takes {"answer": <string>}; got {"query": "x"}'
    assert episode.call("search", "not json").startswith('search takes {"query": <string>}')
    assert "unknown tool 'nope'" in episode.call("nope", "{}")
    assert not episode.done and "<information>" in episode.call("search", {"query": "festival"})


def test_the_expert_searches_then_answers_and_wins():
    task = agent_task()
    episode = SearchTask(task)
    messages: list[dict] = [{"role": "user", "content": episode.question}]
    names = []
    while not episode.done:
        reply = expert(task, messages, TOOLS)
        call = reply["tool_calls"][0]
        names.append(call["name"])
        messages.append({"role": "assistant", "content": "", "tool_calls": [
            {"id": "c", "name": call["name"], "arguments": json.dumps(call["arguments"])}]})
        messages.append({"role": "tool", "content": episode.call(call["name"], call["arguments"])})
    assert names[-1] == "answer" and set(names[:-1]) == {"search"} and episode.won and episode.reward > 0
    assert expert(task, messages, TOOLS) is None  # nothing left to say
    assert expert(task, messages[:1], TOOLS[:1]) is None  # an agent without an `answer` tool: no reply
