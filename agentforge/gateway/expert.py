"""Expert replies through the gateway: the tool-format warm start of an external agent (`env=agent`).

Why: a small model as shipped (SmolLM2-135M) never writes `<tool_call>`; an agent's calls then use no tool, every
episode scores 0 and RL has nothing to learn from. The built-in envs are warm-started on expert play rendered as the
rollout renders it; an external agent's conversation (its system prompt, its tools, its tool results) is known only
to the agent. So the agent itself is run, unchanged, against the gateway, and an expert (`env.expert`,
`package.module:callable`) writes each reply instead of the engine. The reply is rendered in the chat template's own
tool format (Hermes `<tool_call>` for templates without tools), encoded up to and including the end-of-turn token the
model would sample to stop, and recorded as the call's turn exactly like a sampled one: the next call's prompt extends
it token-exactly. The episodes the task's verifier scores as won are the SFT data (`trainer.warm_start: expert` or
`agentforge sft` with `env=agent`).

The expert is called as `expert(task: AgentTask, messages, tools)` with the call's normalised messages
(`{role, content, tool_calls?: [{id, name, arguments}]}`) and returns the assistant message: a string (plain text),
a dict `{"content"?: str, "tool_calls"?: [{"name": str, "arguments": dict | str}]}` (OpenAI's nested
`{"function": {...}}` form is accepted too), or None when it has no reply (the episode then goes unrewarded and is
not trained on).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentforge.errors import ConfigError
from agentforge.gateway.agent_env import AgentTask
from agentforge.gateway.rendering import ChatRenderer, normalise_call
from agentforge.gateway.sessions import Session
from agentforge.types import Completion

ExpertFn = Callable[[AgentTask, list[dict[str, Any]], list[dict[str, Any]]], Any]


def expert_message(reply: Any, where: str) -> dict[str, Any]:
    """The expert's return value as a normalised assistant message (`rendering.normalise_messages`' form)."""
    if reply is None:
        return {"role": "assistant", "content": ""}
    if isinstance(reply, str):
        return {"role": "assistant", "content": reply}
    if not isinstance(reply, dict):
        raise ConfigError(f"{where} returned {type(reply).__name__}; return a string, a dict {{'content': str, "
                          "'tool_calls': [{'name': str, 'arguments': dict}]}}, or None")
    calls = []
    for k, call in enumerate(reply.get("tool_calls") or []):
        if isinstance(call, dict) and "function" not in call:
            call = {"id": call.get("id", ""), "function": {"name": call.get("name"),
                                                          "arguments": call.get("arguments", {})}}
        calls.append(normalise_call(call, f"{where}: tool_calls[{k}]"))
    message: dict[str, Any] = {"role": "assistant", "content": str(reply.get("content") or "")}
    if calls:
        message["tool_calls"] = calls
    return message


class ExpertReplier:
    """Answers a session's chat calls with the expert's messages, as token ids the model could have sampled."""

    def __init__(self, expert: ExpertFn, renderer: ChatRenderer, task_of: Callable[[Session], AgentTask],
                 name: str = "env.expert") -> None:
        self.expert, self.renderer, self.task_of, self.name = expert, renderer, task_of, name
        tokenizer = renderer.tokenizer
        self.stop_id = int(tokenizer.eos_token_id)
        self.stop_text = tokenizer.decode([self.stop_id], skip_special_tokens=False)

    def reply(self, session: Session, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Completion:
        message = expert_message(self.expert(self.task_of(session), messages, tools), self.name)
        marked = self.assistant_marked(messages, tools, message)
        text = self.renderer.restore(marked)
        ids = [*self.renderer.encode_marked(marked), self.stop_id]
        return Completion(token_ids=ids, logprobs=[0.0] * len(ids), text=text, finish_reason="stop",
                          forced_mask=[False] * len(ids))

    def assistant_marked(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
                         message: dict[str, Any]) -> str:
        """What the model writes for `message` after the generation prompt, as the chat template renders it (its
        own tool format), up to the end-of-turn token; the messages' control-token strings as markers, so the block
        is cut at the template's own end-of-turn token, never at one the expert's text holds."""
        prompt = self.renderer.render_marked(messages, tools, generation_prompt=True)
        full = self.renderer.render_marked([*messages, message], tools, generation_prompt=False)
        if not full.startswith(prompt):
            raise ConfigError("the chat template does not render an assistant reply as a continuation of the "
                              "generation prompt; expert replies cannot be rendered for it")
        block = full[len(prompt):]
        if self.stop_text and self.stop_text in block:
            block = block[: block.index(self.stop_text)]
        return block


def tool_call(name: str, **arguments: Any) -> dict[str, Any]:
    """One tool call of an expert reply: `{"tool_calls": [tool_call("search", query="...")]}`."""
    return {"name": name, "arguments": dict(arguments)}
