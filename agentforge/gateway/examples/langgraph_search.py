"""The search-QA agent as a LangGraph graph: a `model` node (the OpenAI client against the gateway) and a `tools`
node, joined by a conditional edge on whether the model called a tool; `env.entry=
agentforge.gateway.examples.langgraph_search:run`. The graph is built once; each episode is one `ainvoke`."""

from __future__ import annotations

import operator
from functools import lru_cache
from typing import Annotated, Any, TypedDict

from agentforge.gateway.examples.search_tools import SYSTEM, TOOLS, SearchTask

MAX_CALLS = 6


class State(TypedDict):
    messages: Annotated[list[dict[str, Any]], operator.add]
    calls: int
    client: Any  # the OpenAI client against this episode's session
    episode: SearchTask  # the task's env behind the tools


@lru_cache(maxsize=1)
def graph() -> Any:
    from langgraph.graph import END, START, StateGraph

    async def model(state: State) -> dict[str, Any]:
        client, episode = state["client"], state["episode"]
        response = await client.chat.completions.create(model="agentforge-policy", messages=state["messages"],
                                                        tools=TOOLS)
        message = response.choices[0].message
        if not message.tool_calls:
            episode.answer_text(message.content or "")
        return {"messages": [message.model_dump(exclude_none=True)], "calls": state["calls"] + 1}

    def tools(state: State) -> dict[str, Any]:
        episode = state["episode"]
        results = []
        for call in state["messages"][-1]["tool_calls"]:
            output = episode.call(call["function"]["name"], call["function"]["arguments"])
            if episode.done:
                break
            results.append({"role": "tool", "tool_call_id": call["id"], "content": output})
        return {"messages": results}

    def after_model(state: State) -> str:
        done = state["episode"].done or state["calls"] >= MAX_CALLS
        return END if done or not state["messages"][-1].get("tool_calls") else "tools"

    def after_tools(state: State) -> str:
        return END if state["episode"].done else "model"

    builder = StateGraph(State)
    builder.add_node("model", model)
    builder.add_node("tools", tools)
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", after_model, ["tools", END])
    builder.add_conditional_edges("tools", after_tools, ["model", END])
    return builder.compile()


async def run(task: Any, base_url: str, api_key: str) -> dict[str, Any]:
    from openai import AsyncOpenAI

    from agentforge.gateway.examples.client import http_client

    episode = SearchTask(task)
    client = AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0, http_client=http_client())
    try:
        start = {"messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": episode.question}],
                 "calls": 0, "client": client, "episode": episode}
        await graph().ainvoke(start, {"recursion_limit": 4 * MAX_CALLS})
    finally:
        await client.close()
    return episode.outcome()
