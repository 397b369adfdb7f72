"""Tool calling in the Hermes format: the tool prompt for chat templates that know no tools, tool calls parsed out of
the model's text into OpenAI `tool_calls`, and the request's tool definitions checked before anything is generated.

The model writes `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` (Hermes / Qwen2.5 / Qwen3 style). A
template that renders `tools` itself (Qwen's) is given them; one that does not (SmolLM2's ChatML) gets the tool
prompt below in its system message, and earlier assistant tool calls rendered back into the same tags.
"""

from __future__ import annotations

import contextlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

from agentforge.gateway.errors import RequestError

TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)
TOOL_PROMPT = (
    "You may call one or more functions to assist with the user query. The functions are described inside "
    "<tools></tools>:\n<tools>\n{tools}\n</tools>\nFor each function call, return a JSON object with the function "
    "name and its arguments inside <tool_call></tool_call> tags:\n<tool_call>\n"
    '{{"name": <function-name>, "arguments": <args-json-object>}}\n</tool_call>'
)


@dataclass
class ParsedReply:
    """The assistant message read out of one completion: its text outside tool calls, its tool calls, and what could
    not be parsed (the call is then returned as plain text and the turn flagged)."""

    content: str
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None


_CHECKED: dict[str, bool] = {}  # tool lists already checked (canonical JSON): an agent sends the same every call
_CHECKED_MAX = 1024


def check_tools(tools: Any) -> list[dict[str, Any]]:
    """The request's `tools`, checked: each `{"type": "function", "function": {"name", "parameters"?}}` with a
    parameters object that is a valid JSON schema. A list checked before is not checked again (the JSON-schema check
    was half of a call's handling time: an agent sends the same tools with every call)."""
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise RequestError("`tools` must be a list of {\"type\": \"function\", \"function\": {...}} objects", "tools")
    key = json.dumps(tools, sort_keys=True)
    if key not in _CHECKED:
        _check_tool_list(tools)
        if len(_CHECKED) >= _CHECKED_MAX:
            _CHECKED.clear()
        _CHECKED[key] = True
    return tools


def _check_tool_list(tools: list[Any]) -> None:
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    for i, tool in enumerate(tools):
        where = f"tools[{i}]"
        if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(tool.get("function"), dict):
            raise RequestError(f"{where} must be {{\"type\": \"function\", \"function\": {{\"name\": ..., "
                               "\"parameters\": {...}}}}", where)
        function = tool["function"]
        if not isinstance(function.get("name"), str) or not function["name"]:
            raise RequestError(f"{where}.function.name must be a non-empty string", f"{where}.function.name")
        parameters = function.get("parameters", {"type": "object"})
        if not isinstance(parameters, dict):
            raise RequestError(f"{where}.function.parameters must be a JSON schema object", f"{where}.function")
        try:
            Draft202012Validator.check_schema(parameters)
        except SchemaError as exc:
            raise RequestError(f"{where}.function.parameters is not a valid JSON schema: {exc.message}",
                               f"{where}.function.parameters") from None


def read_tool_choice(choice: Any, tools: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], str | None]:
    """The request's `tool_choice`: (the tools offered, the tool the reply must call: a name, "" for any tool
    (`required`), None for the model's own choice (`auto`, `none`))."""
    if choice is None or choice == "auto":
        return tools, None
    if choice == "none":
        return [], None
    names = [t["function"]["name"] for t in tools]
    if choice == "required" or (isinstance(choice, dict) and choice.get("type") == "function"):
        if not tools:
            raise RequestError(f"tool_choice={json.dumps(choice)} needs `tools` to call; send the tools or drop "
                               "tool_choice", "tool_choice")
        if choice == "required":
            return tools, ""
        name = (choice.get("function") or {}).get("name") if isinstance(choice.get("function"), dict) else None
        if name not in names:
            raise RequestError(f"tool_choice names the function {name!r}, which is not among the request's tools "
                               f"({', '.join(names)})", "tool_choice")
        return tools, str(name)
    raise RequestError('tool_choice must be "none", "auto", "required" or {"type": "function", "function": '
                       '{"name": ...}}', "tool_choice")


def forced_call_prefix(must_call: str) -> str:
    """The opening a reply under `tool_choice` required / a named function is forced to start with (emitted by the
    engine without sampling, so kept out of the loss): the Hermes tool-call tag, and the name when one is named."""
    if not must_call:
        return '<tool_call>\n{"name": "'
    return '<tool_call>\n{"name": ' + json.dumps(must_call, ensure_ascii=False) + ', "arguments":'


def tool_prompt(tools: list[dict[str, Any]]) -> str:
    return TOOL_PROMPT.format(tools="\n".join(json.dumps(t["function"], ensure_ascii=False) for t in tools))


def render_tool_calls(tool_calls: list[dict[str, Any]]) -> str:
    """An assistant message's tool calls as the model would have written them (for templates without tools)."""
    blocks = []
    for call in tool_calls:
        function = call.get("function", {})
        arguments = function.get("arguments", "{}")
        with contextlib.suppress(json.JSONDecodeError):
            arguments = json.loads(arguments) if isinstance(arguments, str) else arguments
        blocks.append("<tool_call>\n" + json.dumps({"name": function.get("name"), "arguments": arguments},
                                                   ensure_ascii=False) + "\n</tool_call>")
    return "\n".join(blocks)


def parse_reply(text: str, tools: list[dict[str, Any]], call_id_prefix: str) -> ParsedReply:
    """Tool calls out of the model's text when the request offered tools (OpenAI's `tool_calls`, arguments as a JSON
    string); malformed calls leave the whole text as the content, with the reason in `error`."""
    if not tools or "<tool_call>" not in text:
        return ParsedReply(content=text)
    names = {t["function"]["name"] for t in tools}
    calls: list[dict[str, Any]] = []
    for k, match in enumerate(TOOL_CALL.finditer(text)):
        try:
            body = json.loads(match.group(1))
        except json.JSONDecodeError as exc:
            return ParsedReply(content=text, error=f"tool call {k + 1} is not JSON ({exc.msg} at {exc.pos})")
        if not isinstance(body, dict) or not isinstance(body.get("name"), str):
            return ParsedReply(content=text, error=f"tool call {k + 1} has no \"name\"")
        if body["name"] not in names:
            return ParsedReply(content=text, error=f"tool call {k + 1} names {body['name']!r}, which is not among "
                                                   f"the request's tools {sorted(names)}")
        arguments = body.get("arguments", {})
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except json.JSONDecodeError:
                return ParsedReply(content=text, error=f"tool call {k + 1}'s arguments are not JSON")
        if not isinstance(arguments, dict):
            return ParsedReply(content=text, error=f"tool call {k + 1}'s arguments are not a JSON object")
        calls.append({"id": f"{call_id_prefix}_{k}", "type": "function",
                      "function": {"name": body["name"], "arguments": json.dumps(arguments, ensure_ascii=False)}})
    content = TOOL_CALL.sub("", text).strip()
    return ParsedReply(content=content, tool_calls=calls)
