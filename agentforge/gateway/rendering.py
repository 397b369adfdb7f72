"""Chat messages → prompt token ids, token-exact across the calls of a session.

The first call of a session is rendered once with the tokenizer's chat template. A later call whose messages extend
an earlier call's — the same messages, then the assistant reply the gateway returned, then new messages (tool
results, a user turn) — is built as that call's prompt ids + the response ids the engine sampled + the encoding of
only the new part. Earlier assistant turns are therefore never re-encoded from text: the tokens the model sees are
the ones it sampled (no re-tokenisation drift, and the prompt shares its prefix with the previous call's KV cache).

The new part is found with a sentinel: the conversation is rendered with the matched assistant message replaced by
a marker, and everything after the marker's assistant block is the new text. The text of that block after the
content (ChatML: `<|im_end|>\\n`) is added as far as the sampled tokens did not already end with it (a response
that stopped on `<|im_end|>` needs only the `\\n`; one cut by `max_tokens` needs both).

A request that matches no earlier call (an edited or truncated history) is rendered from scratch and flagged
(`reencoded`, with the reason): trained as the engine saw it, and counted.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from typing import Any

from agentforge.gateway.errors import RequestError
from agentforge.gateway.tools import render_tool_calls, tool_prompt

SENTINEL = "\u2063agentforge-sentinel\u2063"
ROLES = ("system", "developer", "user", "assistant", "tool")


def text_of(content: Any, where: str) -> str:
    """A message's content as text: a string, None, or OpenAI content parts of type text."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for i, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") not in ("text", "input_text", "output_text"):
                raise RequestError(f"{where}.content[{i}] is not a text part; the gateway trains text models only",
                                   f"{where}.content")
            parts.append(str(part.get("text", "")))
        return "".join(parts)
    raise RequestError(f"{where}.content must be a string or a list of text parts", f"{where}.content")


def normalise_messages(messages: Any) -> list[dict[str, Any]]:
    """The request's messages reduced to what the prompt depends on: role, text content, tool calls (name and
    arguments) and tool-call ids. Clients add fields (refusal, annotations, audio: null) that must not break the
    match against the session's own records."""
    if not isinstance(messages, list) or not messages:
        raise RequestError("`messages` must be a non-empty list of {role, content} objects", "messages")
    out = []
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            raise RequestError(f"{where} needs a role among {', '.join(ROLES)}", f"{where}.role")
        role = "system" if message["role"] == "developer" else message["role"]
        item: dict[str, Any] = {"role": role, "content": text_of(message.get("content"), where)}
        calls = message.get("tool_calls") or []
        if role == "assistant" and calls:
            item["tool_calls"] = [normalise_call(c, f"{where}.tool_calls[{k}]") for k, c in enumerate(calls)]
        if role == "tool" and message.get("tool_call_id") is not None:
            item["tool_call_id"] = str(message["tool_call_id"])
        out.append(item)
    return out


def normalise_call(call: Any, where: str) -> dict[str, Any]:
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise RequestError(f"{where} must be {{\"id\", \"type\": \"function\", \"function\": {{\"name\", "
                           "\"arguments\"}}}}", where)
    arguments = function.get("arguments", "{}")
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=False)
    with contextlib.suppress(json.JSONDecodeError):  # compare by value: a client may re-serialise the JSON
        arguments = json.dumps(json.loads(arguments), ensure_ascii=False, sort_keys=True)
    return {"id": str(call.get("id", "")), "name": function["name"], "arguments": arguments}


@dataclass
class PromptBuild:
    """A call's prompt ids, and how they were made: `base` (the earlier call extended, or None for a first call or
    a re-encoded one) and `reencoded` (why the history was rendered from scratch, or None)."""

    ids: list[int]
    new_text: str  # the text this call added to the conversation (the whole render for a first call)
    base: int | None = None
    reencoded: str | None = None


class ChatRenderer:
    """Renders normalised messages with the tokenizer's chat template (Hermes tool format where the template has
    none) and builds each call's prompt ids token-exactly (see the module docstring)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.native_tools = "tools" in (tokenizer.chat_template or "")
        self.special_ids = set(tokenizer.all_special_ids)

    def template_messages(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out = []
        for m in messages:
            item = {"role": m["role"], "content": m["content"]}
            if m.get("tool_calls"):
                calls = [{"id": c["id"], "type": "function",
                          "function": {"name": c["name"], "arguments": c["arguments"]}} for c in m["tool_calls"]]
                if self.native_tools:
                    item["tool_calls"] = [{**c, "function": {**c["function"],
                                                            "arguments": json.loads(c["function"]["arguments"])}}
                                          for c in calls]
                else:
                    item["content"] = "\n".join(x for x in (m["content"], render_tool_calls(calls)) if x)
            if m.get("tool_call_id") is not None:
                item["tool_call_id"] = m["tool_call_id"]
            out.append(item)
        if tools and not self.native_tools:
            prompt = tool_prompt(tools)
            if out and out[0]["role"] == "system":
                out[0] = {**out[0], "content": f"{out[0]['content']}\n\n{prompt}" if out[0]["content"] else prompt}
            else:
                out.insert(0, {"role": "system", "content": prompt})
        return out

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], generation_prompt: bool) -> str:
        kwargs = {"tools": tools} if tools and self.native_tools else {}
        return self.tokenizer.apply_chat_template(self.template_messages(messages, tools), tokenize=False,
                                                  add_generation_prompt=generation_prompt, **kwargs)

    def encode(self, text: str) -> list[int]:
        return [int(t) for t in self.tokenizer.encode(text, add_special_tokens=False)]

    def fresh(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], why: str | None = None) -> PromptBuild:
        text = self.render(messages, tools, generation_prompt=True)
        return PromptBuild(self.encode(text), text, reencoded=why)

    def extend(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], at: int, prompt_ids: list[int],
               response_ids: list[int]) -> PromptBuild | None:
        """The prompt of `messages`, whose message `at` is the assistant reply sampled as `response_ids` after
        `prompt_ids`: those ids, then only the new text encoded. None when the template does not render the
        conversation as a prefix-extension (the caller then renders it from scratch)."""
        marked = [*messages[:at], {"role": "assistant", "content": SENTINEL}, *messages[at + 1:]]
        head = self.render(marked[: at + 1], tools, generation_prompt=False)
        full = self.render(marked, tools, generation_prompt=True)
        if not full.startswith(head) or head.count(SENTINEL) != 1:
            return None
        tail = head[head.index(SENTINEL) + len(SENTINEL):]  # the assistant block's text after its content
        last = response_ids[-1] if response_ids else None
        if last is not None and last in self.special_ids:
            ending = self.tokenizer.decode([last], skip_special_tokens=False)
            if tail.startswith(ending):
                tail = tail[len(ending):]  # the sampled stop token already closes the block
        new_text = full[len(head):]
        return PromptBuild([*prompt_ids, *response_ids, *self.encode(tail + new_text)], new_text)
