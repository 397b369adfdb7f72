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

Message text is encoded as text (`agentforge.models.control_text`, shared with the agent loop): a control token's
string (`<|im_end|>`, `<|im_start|>`) inside a message, a tool definition or a tool call is encoded as the
characters it is, never as the control token (a tool result must not be able to forge a turn boundary in what is
trained). `special_tokens="control"` keeps the old behaviour (they become control tokens).
"""

from __future__ import annotations

import contextlib
import json
import re
from dataclasses import dataclass
from typing import Any

import jinja2

from agentforge.errors import ConfigError
from agentforge.gateway.errors import RequestError
from agentforge.gateway.tools import render_tool_calls, tool_prompt
from agentforge.models.control_text import control_text

SENTINEL = "\u2063agentforge-sentinel\u2063"
ROLES = ("system", "developer", "user", "assistant", "tool")
SPECIAL_TOKENS = ("text", "control")


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
        if not isinstance(calls, list):
            raise RequestError(f"{where}.tool_calls must be a list of {{\"id\", \"type\": \"function\", "
                               "\"function\": {\"name\", \"arguments\"}} objects", f"{where}.tool_calls")
        if role == "assistant" and calls:
            item["tool_calls"] = [normalise_call(c, f"{where}.tool_calls[{k}]") for k, c in enumerate(calls)]
        if role == "tool" and message.get("tool_call_id") is not None:
            if not isinstance(message["tool_call_id"], (str, int)) or isinstance(message["tool_call_id"], bool):
                raise RequestError(f"{where}.tool_call_id must be a string", f"{where}.tool_call_id")
            item["tool_call_id"] = str(message["tool_call_id"])
        out.append(item)
    return out


def normalise_call(call: Any, where: str) -> dict[str, Any]:
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise RequestError(f"{where} must be {{\"id\", \"type\": \"function\", \"function\": {{\"name\", "
                           "\"arguments\"}}}}", where)
    arguments = function.get("arguments", "{}")
    if arguments is None:
        arguments = "{}"
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=False)
    with contextlib.suppress(json.JSONDecodeError):  # compare by value: a client may re-serialise the JSON
        arguments = json.dumps(json.loads(arguments), ensure_ascii=False, sort_keys=True)
    return {"id": str(call.get("id", "")), "name": function["name"], "arguments": arguments}


@dataclass
class PromptBuild:
    """A call's prompt ids, and how they were made: `base` (the earlier call extended, or None for a first call or
    a re-encoded one), `reencoded` (why the history was rendered from scratch, or None) and `repeats` (the earlier
    call whose messages this request repeats exactly: its prompt ids are reused)."""

    ids: list[int]
    new_text: str  # the text this call added to the conversation (the whole render for a first call)
    base: int | None = None
    reencoded: str | None = None
    repeats: int | None = None  # the earlier call whose request this one repeats (a new sample of its prompt)


def json_arguments(call: dict[str, Any], message: int, index: int) -> Any:
    """A tool call's `arguments` (a JSON string, as the OpenAI API sends them) as the object a template reads."""
    try:
        return json.loads(call["function"]["arguments"])
    except (TypeError, ValueError, RecursionError):
        raise RequestError(f"messages[{message}].tool_calls[{index}].function.arguments is not JSON; send the "
                           "arguments as a JSON object string, as the model's reply gave them",
                           f"messages[{message}].tool_calls") from None


class ChatRenderer:
    """Renders normalised messages with the tokenizer's chat template (Hermes tool format where the template has
    none) and builds each call's prompt ids token-exactly (see the module docstring). `special_tokens`: "text"
    (control-token strings inside messages are encoded as text) or "control" (they become control tokens)."""

    def __init__(self, tokenizer: Any, special_tokens: str = "text") -> None:
        if special_tokens not in SPECIAL_TOKENS:
            raise ConfigError(f"special_tokens={special_tokens!r}: choose 'text' (control-token strings in messages "
                              "are encoded as text, the default) or 'control' (they become control tokens)")
        self.tokenizer = tokenizer
        self.native_tools = "tools" in (tokenizer.chat_template or "")
        self.special_ids = set(tokenizer.all_special_ids)
        self.escape_specials = special_tokens == "text"
        self.text = control_text(tokenizer)
        self.controls = self.text.controls  # control token string -> id
        self._bytes: dict[int, bytes] = {}
        self._byte_decoder: dict[str, int] | None = None
        if "ByteLevel" in str(getattr(getattr(tokenizer, "backend_tokenizer", None), "decoder", "")):
            from transformers.convert_slow_tokenizer import bytes_to_unicode

            self._byte_decoder = {c: b for b, c in bytes_to_unicode().items()}

    # --------------------------------------------------------------------------- message text stays text
    def escape(self, value: Any) -> Any:
        """`value` (a string, or strings inside lists and dicts) with control-token strings (and the marker
        character itself) replaced by markers; unchanged under special_tokens="control"."""
        return self.text.escape(value) if self.escape_specials else value

    def restore(self, marked: str) -> str:
        """The text a marked rendering stands for."""
        return self.text.restore(marked)

    def encode_marked(self, marked: str) -> list[int]:
        """Ids of a marked rendering: the template's control tokens as ids, everything between them as text."""
        return self.text.encode_marked(marked)

    # ---------------------------------------------------------------------------------------- rendering
    def template_messages(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out = []
        for m in messages:
            item = {"role": m["role"], "content": self.escape(m["content"])}
            if m.get("tool_calls"):
                calls = [{"id": self.escape(c["id"]), "type": "function",
                          "function": {"name": self.escape(c["name"]), "arguments": self.escape(c["arguments"])}}
                         for c in m["tool_calls"]]
                if self.native_tools:  # (a template that takes tools reads the arguments as an object)
                    item["tool_calls"] = [{**c, "function": {**c["function"],
                                                            "arguments": json_arguments(c, len(out), k)}}
                                          for k, c in enumerate(calls)]
                else:
                    item["content"] = "\n".join(x for x in (item["content"], render_tool_calls(calls)) if x)
            if m.get("tool_call_id") is not None:
                item["tool_call_id"] = self.escape(m["tool_call_id"])
            out.append(item)
        if tools and not self.native_tools:
            prompt = tool_prompt(self.escape(tools))
            if out and out[0]["role"] == "system":
                out[0] = {**out[0], "content": f"{out[0]['content']}\n\n{prompt}" if out[0]["content"] else prompt}
            else:
                out.insert(0, {"role": "system", "content": prompt})
        return out

    def render_marked(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
                      generation_prompt: bool) -> str:
        """The template's rendering with control-token strings of the messages as markers (`encode_marked`)."""
        kwargs = {"tools": self.escape(tools)} if tools and self.native_tools else {}
        try:
            return self.tokenizer.apply_chat_template(self.template_messages(messages, tools), tokenize=False,
                                                      add_generation_prompt=generation_prompt, **kwargs)
        except jinja2.TemplateError as error:  # the template's own raise_exception (e.g. roles out of order)
            raise RequestError(f"the model's chat template refused this conversation: {str(error)[:300]}",
                               "messages") from None

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], generation_prompt: bool) -> str:
        return self.restore(self.render_marked(messages, tools, generation_prompt))

    def encode(self, text: str) -> list[int]:
        """Plain text → ids, control-token strings as control tokens (a template's own text, a raw prompt)."""
        return self.text.encode(text)

    def fresh(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], why: str | None = None) -> PromptBuild:
        marked = self.render_marked(messages, tools, generation_prompt=True)
        return PromptBuild(self.encode_marked(marked), self.restore(marked), reencoded=why)

    def extend(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], at: int, prompt_ids: list[int],
               response_ids: list[int], carry: str = "") -> PromptBuild | None:
        """The prompt of `messages`, whose message `at` is the assistant reply sampled as `response_ids` after
        `prompt_ids`: those ids, then only the new text encoded (after `carry`: reply text the client was given
        beyond `response_ids`, when a stop string cut a token). None when the template does not render the
        conversation as a prefix-extension (the caller then renders it from scratch)."""
        marked = [*messages[:at], {"role": "assistant", "content": SENTINEL}, *messages[at + 1:]]
        head = self.render_marked(marked[: at + 1], tools, generation_prompt=False)
        full = self.render_marked(marked, tools, generation_prompt=True)
        if not full.startswith(head) or head.count(SENTINEL) != 1:
            return None
        tail = head[head.index(SENTINEL) + len(SENTINEL):]  # the assistant block's text after its content
        last = response_ids[-1] if response_ids else None
        if last is not None and last in self.special_ids and not carry:
            ending = self.tokenizer.decode([last], skip_special_tokens=False)
            if tail.startswith(ending):
                tail = tail[len(ending):]  # the sampled stop token already closes the block
        new_text = full[len(head):]
        ids = self.encode_marked(self.escape(carry) + tail + new_text)
        return PromptBuild([*prompt_ids, *response_ids, *ids], self.restore(new_text))

    # ------------------------------------------------------------------------------------------ token bytes
    def token_bytes(self, token_id: int) -> bytes:
        """A token's own bytes (a byte-level token holding part of a UTF-8 character gives that part, not U+FFFD):
        what OpenAI's `logprobs[].bytes` carries, so a client can rebuild the text from them."""
        cached = self._bytes.get(token_id)
        if cached is not None:
            return cached
        text = self.tokenizer.decode([token_id], skip_special_tokens=False)
        piece = self.tokenizer.convert_ids_to_tokens(int(token_id))
        out = text.encode()
        if token_id not in self.special_ids and isinstance(piece, str):
            byte = re.fullmatch(r"<0x([0-9A-Fa-f]{2})>", piece)  # sentencepiece byte fallback
            if byte is not None:
                out = bytes([int(byte.group(1), 16)])
            elif self._byte_decoder is not None and all(c in self._byte_decoder for c in piece):
                out = bytes(self._byte_decoder[c] for c in piece)
            elif "\ufffd" in text:
                out = piece.replace("\u2581", " ").encode()
        self._bytes[token_id] = out
        return out
