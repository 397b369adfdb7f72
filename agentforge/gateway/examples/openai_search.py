"""A tool-calling search agent on the plain `openai` client: the loop any OpenAI-API agent already has. agentforge
only gives it a base_url and an api_key (`env=agent env.entry=agentforge.gateway.examples.openai_search:run`)."""

from __future__ import annotations

from typing import Any

from agentforge.gateway.examples.search_tools import SYSTEM, TOOLS, SearchTask

MAX_CALLS = 6


async def run(task: Any, base_url: str, api_key: str) -> dict[str, Any]:
    from openai import AsyncOpenAI

    from agentforge.gateway.examples.client import http_client

    episode = SearchTask(task)
    client = AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0, http_client=http_client())
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM},
                                      {"role": "user", "content": episode.question}]
    try:
        for _ in range(MAX_CALLS):
            response = await client.chat.completions.create(model="agentforge-policy", messages=messages,
                                                            tools=TOOLS)
            message = response.choices[0].message
            messages.append(message.model_dump(exclude_none=True))  # the reply exactly as returned
            if not message.tool_calls:
                episode.answer_text(message.content or "")
                break
            for call in message.tool_calls:
                output = episode.call(call.function.name, call.function.arguments)
                if episode.done:
                    break
                messages.append({"role": "tool", "tool_call_id": call.id, "content": output})
            if episode.done:
                break
    finally:
        await client.close()
    return episode.outcome()
