"""One OpenAI request → one recorded model call: read the request, build the prompt token-exactly, generate through
the batcher, parse tool calls, record the call as a turn of the session's episode, and answer in OpenAI's shape.

Sampling: the engine samples at the run's own temperature / top-p / top-k (the learner's log-probs assume them); a
request's `temperature` and `top_p` are recorded with the turn, not applied. `max_tokens` (or
`max_completion_tokens`) is honoured up to `agent.sampling.max_new_tokens`; `stop` is honoured, the stop string
omitted from the reply as OpenAI does (`replies.client_reply`: the trained ids and the next prompt match it).

Retries: a request identical to the session's latest call that the client marks as a retry (the openai SDK's
`x-stainless-retry-count` >= 1, or the same `Idempotency-Key`) is answered with that call's response again, and no
turn is added; an identical request without the mark is a new sample of the same prompt (its ids reused).
"""

from __future__ import annotations

import json
import logging
import math
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import replace
from typing import Any

from agentforge.engines.interventions import InterventionSpec
from agentforge.gateway.batcher import GenerationBatcher
from agentforge.gateway.errors import RequestError
from agentforge.gateway.expert import ExpertReplier
from agentforge.gateway.rendering import ChatRenderer, PromptBuild, normalise_call, normalise_messages
from agentforge.gateway.replies import ClientReply, chat_logprobs, client_reply, text_logprobs
from agentforge.gateway.sessions import CallRecord, Session, build_prompt
from agentforge.gateway.tools import check_tools, forced_call_prefix, parse_reply, read_tool_choice
from agentforge.rollout.turns import version_info
from agentforge.rollout.workflow import RolloutStats
from agentforge.types import Completion, LossRole, SamplingConfig, Turn

log = logging.getLogger("agentforge.gateway")
FINISH = {"stop": "stop", "length": "length", "abort": "stop"}
RETRY_COUNT = "x-stainless-retry-count"  # the openai SDKs number their attempts: 0, then 1, 2 ... on retries
IDEMPOTENCY_KEY = "idempotency-key"
GENERATE_TIMEOUT_S = 900.0  # a call's wait for its generation (the engine's queue included)
MAX_STOPS, MAX_STOP_CHARS = 16, 1000  # stop strings a request may send (OpenAI takes 4)


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_number(body: dict[str, Any], key: str, low: float, high: float) -> None:
    value = body.get(key)
    if value is None:
        return
    try:  # (a 4000-digit integer is valid JSON and too large for a float)
        number = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan
    except OverflowError:
        number = math.inf
    if not math.isfinite(number) or not low <= number <= high:
        shown = value if len(repr(value)) <= 40 else f"{repr(value)[:20]}... ({len(repr(value))} characters)"
        raise RequestError(f"{key}={shown} must be a number in [{low:g}, {high:g}] (or absent)", key)


def check_flag(body: dict[str, Any], key: str) -> bool:
    value = body.get(key)
    if value is not None and not isinstance(value, bool):
        raise RequestError(f"{key}={value!r} must be true or false", key)
    return bool(value)


def request_sampling(body: dict[str, Any], base: SamplingConfig) -> SamplingConfig:
    """The run's sampling with the request's token budget and stop strings; `n` > 1 and streaming refused. Every
    field the gateway reads is type-checked (a 400 naming it, never a 500 or a silent coercion)."""
    if check_flag(body, "stream"):
        raise RequestError("streaming is not supported by the agentforge gateway; set stream=false", "stream")
    n = body.get("n", 1)
    if n is not None and (not is_int(n) or n != 1):
        raise RequestError(f"n={n!r}: the gateway samples one choice per call (every call is one trained turn of its "
                           "episode; the group's other samples are other episodes); set n=1", "n")
    check_number(body, "temperature", 0.0, 2.0)
    check_number(body, "top_p", 0.0, 1.0)
    top = body.get("top_logprobs")
    if top is not None and (not is_int(top) or not 0 <= top <= 20):
        raise RequestError(f"top_logprobs={top!r} must be an integer in [0, 20] (the gateway returns none)",
                           "top_logprobs")
    max_new = int(base.max_new_tokens)
    for key in ("max_completion_tokens", "max_tokens"):
        budget = body.get(key)
        if budget is None:
            continue
        if not is_int(budget) or budget < 1:
            raise RequestError(f"{key}={budget!r} must be a positive integer", key)
        max_new = min(max_new, budget)
        break
    stop = body.get("stop")
    stop = [] if stop is None else [stop] if isinstance(stop, str) else stop
    if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
        raise RequestError(f"stop={str(body.get('stop'))[:80]!r} must be a string or a list of strings", "stop")
    if len(stop) > MAX_STOPS or any(len(s) > MAX_STOP_CHARS for s in stop):
        raise RequestError(f"stop: at most {MAX_STOPS} strings of at most {MAX_STOP_CHARS} characters each (got "
                           f"{len(stop)}, the longest {max(map(len, stop), default=0)})", "stop")
    return replace(base, max_new_tokens=max_new, stop=[*base.stop, *(s for s in stop if s)])


def request_identity(body: dict[str, Any], headers: Mapping[str, str] | None) -> tuple[str, bool, str | None]:
    """(the body as canonical JSON, whether the client marked the request a retry, its idempotency key)."""
    headers = headers or {}
    count = str(headers.get(RETRY_COUNT, "0")).strip()
    retried = count.isascii() and count.isdigit() and count.strip("0") != ""  # (no int(): 5000 digits raise)
    return (json.dumps(body, sort_keys=True, ensure_ascii=False), retried,
            headers.get(IDEMPOTENCY_KEY) or None)


class CallHandler:
    """Runs requests for the gateway's sessions (from handler threads; a session's calls run one at a time)."""

    def __init__(self, renderer: ChatRenderer, batcher: GenerationBatcher | None, sampling: Any, max_model_len: int,
                 model_name: str, stats: Callable[[], RolloutStats], expert: ExpertReplier | None = None,
                 generate_timeout_s: float = GENERATE_TIMEOUT_S) -> None:
        """`batcher`: the engine's calls; with `expert` (expert play, no engine) the expert writes every reply.
        `generate_timeout_s`: the longest a call waits for its generation (then 504, its session's lock freed)."""
        self.renderer, self.batcher, self.sampling, self.stats = renderer, batcher, sampling, stats
        self.max_model_len, self.model_name, self.expert = int(max_model_len), model_name, expert
        self.generate_timeout_s = float(generate_timeout_s)

    # ------------------------------------------------------------------------------------------------- chat
    def chat(self, session: Session, body: dict[str, Any], headers: Mapping[str, str] | None = None) -> dict[str, Any]:
        """`headers`: the request's (lower-case names), for its retry marks."""
        messages = normalise_messages(body.get("messages"))
        check_flag(body, "logprobs")
        tools, must_call = read_tool_choice(body.get("tool_choice"), check_tools(body.get("tools")))
        sampling = request_sampling(body, self.sampling())
        key, retried, idempotency = request_identity(body, headers)
        forced = None
        if must_call is not None and self.expert is None:  # the engine opens the reply with the tool call's tag
            opening = self.renderer.encode_marked(self.renderer.escape(forced_call_prefix(must_call)))
            forced = InterventionSpec("force_sequence", {"sequence": opening, "after_tokens": 0})
        with session.lock:
            session.check_open()
            replayed = self._replay(session, key, retried, idempotency)
            if replayed is not None:
                return replayed
            self._check_budget(session)
            prompt = build_prompt(self.renderer, session, messages, tools)
            self._log_reencoded(session, prompt)
            if self.expert is not None:
                completion = self.expert.reply(session, messages, tools)
                reply = ClientReply(completion, completion.text, sampled=len(completion.token_ids))
            else:
                reply = self._reply(self._generate(session, prompt.ids, sampling, forced), sampling)
            parsed = parse_reply(reply.text, tools, f"call_{session.id}_{len(session.calls)}")
            normalised = {"role": "assistant", "content": parsed.content,
                          "tool_calls": [normalise_call(c, "reply") for c in parsed.tool_calls]}
            finish = "tool_calls" if parsed.tool_calls else FINISH.get(reply.completion.finish_reason, "stop")
            message: dict[str, Any] = {"role": "assistant", "content": parsed.content or (None if parsed.tool_calls
                                                                                          else "")}
            if parsed.tool_calls:
                message["tool_calls"] = parsed.tool_calls
            choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": finish, "logprobs": (
                chat_logprobs(self.renderer, reply.completion) if body.get("logprobs") else None)}
            # the whole response first, then the records: a failure on the way records nothing, so the client's
            # retry is a new call, never a second turn of one reply
            response = self._envelope("chat.completion", choice, prompt.ids, reply.sampled)
            record = CallRecord(messages, tools, prompt, reply.completion, normalised, finish, reply.carry, key,
                                idempotency_key=idempotency, response=response)
            session.calls.append(record)
            self._record_turn(session, prompt, reply, body, action=summarise(parsed.content, parsed.tool_calls),
                              valid=parsed.error is None, info={"tool_calls": parsed.tool_calls,
                                                                "tool_parse_error": parsed.error})
        return response

    # ------------------------------------------------------------------------------------------ completions
    def completion_prompt(self, body: dict[str, Any]) -> tuple[list[int], Any]:
        """The request's prompt as token ids (a string is encoded; ids are taken as they are), and as sent."""
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
            prompt = prompt[0]
        if isinstance(prompt, str):
            ids = self.renderer.encode(prompt)
        elif isinstance(prompt, list) and prompt and all(is_int(t) for t in prompt):
            ids = [int(t) for t in prompt]  # token ids are taken as they are: exact by construction
            vocab = len(self.renderer.tokenizer)
            bad = next((t for t in ids if not 0 <= t < vocab), None)
            if bad is not None:
                raise RequestError(f"prompt token id {bad} is outside the model's vocabulary [0, {vocab}); send ids "
                                   "of this model's tokenizer", "prompt")
        else:
            raise RequestError("`prompt` must be a string or a list of token ids (one prompt per call)", "prompt")
        if not ids:
            raise RequestError("`prompt` is empty; send at least one token", "prompt")
        return ids, prompt

    def completion(self, session: Session, body: dict[str, Any],
                   headers: Mapping[str, str] | None = None) -> dict[str, Any]:
        if check_flag(body, "echo"):
            raise RequestError("echo (the prompt's log-probs) is answered by `agentforge serve`, not by a training "
                               "gateway: every call here is a turn of an episode; drop echo", "echo")
        ids, prompt = self.completion_prompt(body)
        if self.expert is not None:
            raise RequestError("expert play (the warm start) answers chat calls only: the expert writes assistant "
                               "messages; call /v1/chat/completions", "prompt")
        logprobs = body.get("logprobs")
        if logprobs is not None and not (isinstance(logprobs, bool) or (is_int(logprobs) and 0 <= logprobs <= 5)):
            raise RequestError(f"logprobs={logprobs!r} must be an integer in [0, 5] (or true/false)", "logprobs")
        sampling = request_sampling(body, self.sampling())
        key, retried, idempotency = request_identity(body, headers)
        with session.lock:
            session.check_open()
            replayed = self._replay(session, key, retried, idempotency)
            if replayed is not None:
                return replayed
            self._check_budget(session)
            built = PromptBuild(ids, prompt if isinstance(prompt, str) else "")
            reply = self._reply(self._generate(session, ids, sampling), sampling)
            finish = FINISH.get(reply.completion.finish_reason, "stop")
            wanted = logprobs is not None and logprobs is not False
            choice = {"index": 0, "text": reply.text, "finish_reason": finish,
                      "logprobs": text_logprobs(self.renderer, reply.completion) if wanted else None}
            response = self._envelope("text_completion", choice, ids, reply.sampled)  # (before the records: chat)
            record = CallRecord([], [], built, reply.completion, {"content": reply.text, "tool_calls": []}, finish,
                                reply.carry, key, idempotency_key=idempotency, response=response)
            session.calls.append(record)
            self._record_turn(session, built, reply, body, action=summarise(reply.text, []), valid=True, info={})
        return response

    # ----------------------------------------------------------------------------------------------- parts
    def _check_budget(self, session: Session) -> None:
        if len(session.calls) >= session.max_calls:
            raise RequestError(f"session {session.id!r} made its {session.max_calls} model calls "
                               "(env.max_calls); end the episode or raise the limit", status=429,
                               kind="rate_limit_error", code="call_budget_spent")

    def _replay(self, session: Session, key: str, retried: bool, idempotency: str | None) -> dict[str, Any] | None:
        """The latest call's response again when this request is its retry (the same body, marked a retry)."""
        if not session.calls:
            return None
        last = session.calls[-1]
        again = retried or (idempotency is not None and idempotency == last.idempotency_key)
        if not again or last.request_key != key or last.response is None:
            return None
        log.info("gateway: session %s: a retry of call %d answered with its response again (no new turn)",
                 session.id, len(session.calls) - 1)
        session.replays += 1
        return json.loads(json.dumps(last.response))

    def _log_reencoded(self, session: Session, prompt: PromptBuild) -> None:
        if prompt.reencoded is not None:
            log.warning("gateway: session %s call %d rendered from scratch (trained as the engine saw it): %s",
                        session.id, len(session.calls), prompt.reencoded)

    def _reply(self, completion: Completion, sampling: SamplingConfig) -> ClientReply:
        return client_reply(self.renderer.tokenizer, completion, list(sampling.stop), self.renderer.special_ids)

    def _generate(self, session: Session, prompt_ids: list[int], sampling: SamplingConfig,
                  forced: InterventionSpec | None = None) -> Completion:
        if len(prompt_ids) + sampling.max_new_tokens > self.max_model_len:
            raise RequestError(f"the prompt is {len(prompt_ids)} tokens and max_tokens {sampling.max_new_tokens}: "
                               f"more than the engine's {self.max_model_len} (engine.max_model_len); shorten the "
                               "conversation or raise engine.max_model_len", "messages",
                               code="context_length_exceeded")
        assert self.batcher is not None
        pending = self.batcher.submit(session, prompt_ids, sampling, forced)
        try:
            return pending.result(timeout=self.generate_timeout_s)
        except FutureTimeout:
            pending.cancel()
            raise RequestError(f"the engine did not answer within {self.generate_timeout_s:g} s (a stalled engine or "
                               "a very long generation); nothing was recorded: retry, or lower max_tokens", status=504,
                               kind="server_error", code="generation_timeout") from None

    def _record_turn(self, session: Session, prompt: PromptBuild, reply: ClientReply, body: dict[str, Any],
                     action: str, valid: bool, info: dict[str, Any]) -> None:
        episode, completion = session.episode, reply.completion
        details = {"session": session.id, "call": len(session.calls) - 1, "finish_reason": completion.finish_reason,
                   "extends_call": prompt.base, "reencoded": prompt.reencoded, "repeats_call": prompt.repeats,
                   "stop_cut": reply.cut,
                   "requested": {k: body[k] for k in ("temperature", "top_p", "max_tokens", "max_completion_tokens")
                                 if k in body}, **info}
        details.update(version_info(completion))
        episode.trajectory.turns.append(Turn(
            prompt_ids=list(prompt.ids), response_ids=list(completion.token_ids), logprobs=list(completion.logprobs),
            forced_mask=list(completion.forced_mask), response_text=completion.text, action=action, valid=valid,
            reward=0.0, env_reward=0.0, anchor=prompt.new_text, observation=prompt.new_text, info=details,
            role=LossRole.ACTION))
        self.stats().turns += 1

    def _envelope(self, kind: str, choice: dict[str, Any], prompt_ids: list[int], sampled: int) -> dict[str, Any]:
        """`sampled`: the tokens the engine generated (with any a stop string cut off)."""
        return {"id": f"{'chatcmpl' if kind == 'chat.completion' else 'cmpl'}-{uuid.uuid4().hex[:24]}",
                "object": kind, "created": int(time.time()), "model": self.model_name, "choices": [choice],
                "usage": {"prompt_tokens": len(prompt_ids), "completion_tokens": sampled,
                          "total_tokens": len(prompt_ids) + sampled}}


def summarise(content: str, tool_calls: list[dict[str, Any]]) -> str:
    """The turn's action as the viewer shows it: the tool calls, else the text."""
    if tool_calls:
        return "; ".join(f"{c['function']['name']}({c['function']['arguments']})" for c in tool_calls)
    return content
