"""The search-QA agent with its `search` tool served by a real MCP server (stdio subprocess,
`mcp_search_server.py`): the agent lists the server's tools, offers them to the model as OpenAI tools beside its own
`answer`, and routes the model's calls to the server; `env.entry=agentforge.gateway.examples.mcp_search:run`."""

from __future__ import annotations

import sys
from typing import Any

from agentforge.gateway.examples.search_tools import SYSTEM, TOOLS, SearchTask

MAX_CALLS = 6
ANSWER = next(t for t in TOOLS if t["function"]["name"] == "answer")


def openai_tool(tool: Any) -> dict[str, Any]:
    """An MCP tool description as an OpenAI function tool."""
    return {"type": "function", "function": {"name": tool.name, "description": tool.description or "",
                                             "parameters": tool.input_schema}}


async def run(task: Any, base_url: str, api_key: str) -> dict[str, Any]:
    import json

    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client
    from openai import AsyncOpenAI

    from agentforge.gateway.examples.client import http_client

    episode = SearchTask(task)  # the task's question, and the verifier behind `answer`
    options = task.env_options
    args = ["-P", "-m", "agentforge.gateway.examples.mcp_search_server", "--top-k", str(options.get("top_k", 3))]
    if options.get("data_dir"):
        args += ["--data-dir", str(options["data_dir"])]
    client = AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0, http_client=http_client())
    try:
        async with stdio_client(StdioServerParameters(command=sys.executable, args=args)) as (read, write), \
                ClientSession(read, write) as mcp:
            await mcp.initialize()
            served = (await mcp.list_tools()).tools
            tools = [*(openai_tool(t) for t in served), ANSWER]
            names = {t.name for t in served}
            messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM},
                                              {"role": "user", "content": episode.question}]
            for _ in range(MAX_CALLS):
                response = await client.chat.completions.create(model="agentforge-policy", messages=messages,
                                                                tools=tools)
                message = response.choices[0].message
                messages.append(message.model_dump(exclude_none=True))
                if not message.tool_calls:
                    episode.answer_text(message.content or "")
                    break
                for call in message.tool_calls:
                    if call.function.name in names:  # served by the MCP server
                        try:
                            arguments = json.loads(call.function.arguments)
                        except json.JSONDecodeError:
                            output = "the arguments are not JSON"
                        else:
                            result = await mcp.call_tool(call.function.name, arguments)
                            output = "\n".join(getattr(c, "text", "") for c in result.content)
                    else:
                        output = episode.call(call.function.name, call.function.arguments)
                    if episode.done:
                        break
                    messages.append({"role": "tool", "tool_call_id": call.id, "content": output})
                if episode.done:
                    break
    finally:
        await client.close()
    return episode.outcome()
