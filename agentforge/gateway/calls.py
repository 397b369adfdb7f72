"""One OpenAI request → one recorded model call: read the request, build the prompt token-exactly, generate through
the batcher, parse tool calls, record the call as a turn of the session's episode, and answer in OpenAI's shape.

Sampling: the engine samples at the run's own temperature / top-p / top-k (the learner's log-probs assume them); a
request's `temperature` and `top_p` are recorded with the turn, not applied. `max_tokens` (or
`max_completion_tokens`) is honoured up to `agent.sampling.max_new_tokens`; `stop` is honoured.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from agentforge.engines.interventions import InterventionSpec
from agentforge.gateway.batcher import GenerationBatcher
from agentforge.gateway.errors import RequestError
from agentforge.gateway.expert import ExpertReplier
from agentforge.gateway.rendering import ChatRenderer, PromptBuild, normalise_call, normalise_messages
from agentforge.gateway.sessions import CallRecord, Session, build_prompt
from agentforge.gateway.tools import check_tools, forced_call_prefix, parse_reply, read_tool_choice
from agentforge.rollout.turns import version_info
from agentforge.rollout.workflow import RolloutStats
from agentforge.types import Completion, LossRole, SamplingConfig, Turn

FINISH = {"stop": "stop", "length": "length", "abort": "stop"}


def request_sampling(body: dict[str, Any], base: SamplingConfig) -> SamplingConfig:
    """The run's sampling with the request's token budget and stop strings; `n` > 1 and streaming refused."""
    if body.get("stream"):
        raise RequestError("streaming is not supported by the agentforge gateway; set stream=false", "stream")
    n = body.get("n", 1)
    if n != 1:
        raise RequestError(f"n={n}: the gateway samples one choice per call (every call is one trained turn of its "
                           "episode; the group's other samples are other episodes); set n=1", "n")
    budget = body.get("max_completion_tokens", body.get("max_tokens"))
    max_new = int(base.max_new_tokens)
    if budget is not None:
        if not isinstance(budget, int) or budget < 1:
            raise RequestError(f"max_tokens={budget!r} must be a positive integer", "max_tokens")
        max_new = min(max_new, budget)
    stop = body.get("stop") or []
    stop = [stop] if isinstance(stop, str) else list(stop)
    if not all(isinstance(s, str) for s in stop):
        raise RequestError("`stop` must be a string or a list of strings", "stop")
    return replace(base, max_new_tokens=max_new, stop=[*base.stop, *stop])


class CallHandler:
    """Runs requests for the gateway's sessions (from handler threads; a session's calls run one at a time)."""

    def __init__(self, renderer: ChatRenderer, batcher: GenerationBatcher | None, sampling: Any, max_model_len: int,
                 model_name: str, stats: Callable[[], RolloutStats], expert: ExpertReplier | None = None) -> None:
        """`batcher`: the engine's calls; with `expert` (expert play, no engine) the expert writes every reply."""
        self.renderer, self.batcher, self.sampling, self.stats = renderer, batcher, sampling, stats
        self.max_model_len, self.model_name, self.expert = int(max_model_len), model_name, expert

    # ------------------------------------------------------------------------------------------------- chat
    def chat(self, session: Session, body: dict[str, Any]) -> dict[str, Any]:
        messages = normalise_messages(body.get("messages"))
        tools, must_call = read_tool_choice(body.get("tool_choice"), check_tools(body.get("tools")))
        sampling = request_sampling(body, self.sampling())
        forced = None
        if must_call is not None and self.expert is None:  # the engine opens the reply with the tool call's tag
            forced = InterventionSpec("force_sequence", {"sequence": self.renderer.encode(
                forced_call_prefix(must_call)), "after_tokens": 0})
        with session.lock:
            session.check_open()
            self._check_budget(session)
            prompt = build_prompt(self.renderer, session, messages, tools)
            if self.expert is not None:
                completion = self.expert.reply(session, messages, tools)
            else:
                completion = self._generate(session, prompt.ids, sampling, forced)
            parsed = parse_reply(completion.text, tools, f"call_{session.id}_{len(session.calls)}")
            reply = {"role": "assistant", "content": parsed.content,
                     "tool_calls": [normalise_call(c, "reply") for c in parsed.tool_calls]}
            finish = "tool_calls" if parsed.tool_calls else FINISH.get(completion.finish_reason, "stop")
            session.calls.append(CallRecord(messages, tools, prompt, completion, reply, finish))
            self._record_turn(session, prompt, completion, body, action=summarise(parsed.content, parsed.tool_calls),
                              valid=parsed.error is None, info={"tool_calls": parsed.tool_calls,
                                                                "tool_parse_error": parsed.error})
        message: dict[str, Any] = {"role": "assistant", "content": parsed.content or (None if parsed.tool_calls
                                                                                      else "")}
        if parsed.tool_calls:
            message["tool_calls"] = parsed.tool_calls
        choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": finish,
                                  "logprobs": self._logprobs(completion) if body.get("logprobs") else None}
        return self._envelope("chat.completion", choice, prompt.ids, completion)

    # ------------------------------------------------------------------------------------------ completions
    def completion(self, session: Session, body: dict[str, Any]) -> dict[str, Any]:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
            prompt = prompt[0]
        if isinstance(prompt, str):
            ids = self.renderer.encode(prompt)
        elif isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
            ids = [int(t) for t in prompt]  # token ids are taken as they are: exact by construction
        else:
            raise RequestError("`prompt` must be a string or a list of token ids (one prompt per call)", "prompt")
        if self.expert is not None:
            raise RequestError("expert play (the warm start) answers chat calls only: the expert writes assistant "
                               "messages; call /v1/chat/completions", "prompt")
        sampling = request_sampling(body, self.sampling())
        with session.lock:
            session.check_open()
            self._check_budget(session)
            built = PromptBuild(ids, prompt if isinstance(prompt, str) else "")
            completion = self._generate(session, ids, sampling)
            session.calls.append(CallRecord([], [], built, completion, {"content": completion.text, "tool_calls": []},
                                            FINISH.get(completion.finish_reason, "stop")))
            self._record_turn(session, built, completion, body, action=summarise(completion.text, []), valid=True,
                              info={})
        choice = {"index": 0, "text": completion.text, "finish_reason": FINISH.get(completion.finish_reason, "stop"),
                  "logprobs": {"tokens": [self.renderer.tokenizer.decode([t]) for t in completion.token_ids],
                               "token_logprobs": list(completion.logprobs)} if body.get("logprobs") else None}
        return self._envelope("text_completion", choice, ids, completion)

    # ----------------------------------------------------------------------------------------------- parts
    def _check_budget(self, session: Session) -> None:
        if len(session.calls) >= session.max_calls:
            raise RequestError(f"session {session.id!r} made its {session.max_calls} model calls "
                               "(env.max_calls); end the episode or raise the limit", status=429,
                               kind="rate_limit_error", code="call_budget_spent")

    def _generate(self, session: Session, prompt_ids: list[int], sampling: SamplingConfig,
                  forced: InterventionSpec | None = None) -> Completion:
        if len(prompt_ids) + sampling.max_new_tokens > self.max_model_len:
            raise RequestError(f"the prompt is {len(prompt_ids)} tokens and max_tokens {sampling.max_new_tokens}: "
                               f"more than the engine's {self.max_model_len} (engine.max_model_len); shorten the "
                               "conversation or raise engine.max_model_len", "messages",
                               code="context_length_exceeded")
        assert self.batcher is not None
        return self.batcher.submit(session, prompt_ids, sampling, forced).result()

    def _record_turn(self, session: Session, prompt: PromptBuild, completion: Completion, body: dict[str, Any],
                     action: str, valid: bool, info: dict[str, Any]) -> None:
        episode = session.episode
        details = {"session": session.id, "call": len(session.calls) - 1, "finish_reason": completion.finish_reason,
                   "extends_call": prompt.base, "reencoded": prompt.reencoded,
                   "requested": {k: body[k] for k in ("temperature", "top_p", "max_tokens", "max_completion_tokens")
                                 if k in body}, **info}
        details.update(version_info(completion))
        episode.trajectory.turns.append(Turn(
            prompt_ids=list(prompt.ids), response_ids=list(completion.token_ids), logprobs=list(completion.logprobs),
            forced_mask=list(completion.forced_mask), response_text=completion.text, action=action, valid=valid,
            reward=0.0, env_reward=0.0, anchor=prompt.new_text, observation=prompt.new_text, info=details,
            role=LossRole.ACTION))
        self.stats().turns += 1

    def _logprobs(self, completion: Completion) -> dict[str, Any]:
        tokens = [self.renderer.tokenizer.decode([t]) for t in completion.token_ids]
        return {"content": [{"token": token, "logprob": float(lp), "bytes": list(token.encode()), "top_logprobs": []}
                            for token, lp in zip(tokens, completion.logprobs, strict=True)]}

    def _envelope(self, kind: str, choice: dict[str, Any], prompt_ids: list[int],
                  completion: Completion) -> dict[str, Any]:
        return {"id": f"{'chatcmpl' if kind == 'chat.completion' else 'cmpl'}-{uuid.uuid4().hex[:24]}",
                "object": kind, "created": int(time.time()), "model": self.model_name, "choices": [choice],
                "usage": {"prompt_tokens": len(prompt_ids), "completion_tokens": len(completion.token_ids),
                          "total_tokens": len(prompt_ids) + len(completion.token_ids)}}


def summarise(content: str, tool_calls: list[dict[str, Any]]) -> str:
    """The turn's action as the viewer shows it: the tool calls, else the text."""
    if tool_calls:
        return "; ".join(f"{c['function']['name']}({c['function']['arguments']})" for c in tool_calls)
    return content
