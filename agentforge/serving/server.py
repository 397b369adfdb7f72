"""The gateway's server (`agentforge.gateway.server.GatewayServer`: same routes, bearer token, errors, rendering
and Hermes tool-call parsing as in training) on a model for inference: no episodes and no training records to keep.

What changes against training, and why:
- every request is a session of its own (an ASGI wrapper names one for requests that carry none, so a plain
  `OpenAI(base_url=.../v1)` client works); nothing of it is kept after the reply;
- the batcher fires when every request in flight is waiting (counted by the same wrapper), so concurrent clients
  share one engine call;
- a request's `temperature` and `top_p` are applied (training records them but samples at the run's own); the
  default is the exported generation config, i.e. the run's sampling.
"""

from __future__ import annotations

import threading
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from agentforge.gateway.batcher import GenerationBatcher
from agentforge.gateway.calls import CallHandler, check_flag, is_int
from agentforge.gateway.errors import RequestError
from agentforge.gateway.rendering import ChatRenderer
from agentforge.gateway.server import SESSION_HEADER, GatewayServer
from agentforge.gateway.sessions import Session, SessionRegistry
from agentforge.rollout.hooks import RolloutHooks
from agentforge.rollout.workflow import Episode, EpisodePlan, RolloutContext, RolloutStats
from agentforge.types import Observation, SamplingConfig, Task, Trajectory

SERVE_SESSION = "serve"
MAX_CALLS = 1 << 30  # a serve session is one request; the gateway's per-episode call budget does not apply
_request = threading.local()  # the body of the request a handler thread is running (for its sampling)


class ServeRegistry(SessionRegistry):
    """A fresh session for every request (never stored); `live()` is the number of generation requests in flight."""

    def __init__(self) -> None:
        super().__init__()
        self._in_flight = 0
        self._count = 0
        self._flight_lock = threading.Lock()

    def get(self, session_id: str) -> Session:
        with self._flight_lock:
            self._count += 1
            slot = self._count
        task = Task(env="serve", seed=0, split="eval")
        episode = Episode(slot, EpisodePlan(task, 0, 0), Trajectory(task=task, rollout_index=0),
                          Observation(text="", anchor=""))
        return Session(id=f"serve-{slot}", episode=episode, max_calls=MAX_CALLS)

    def started(self) -> None:
        with self._flight_lock:
            self._in_flight += 1

    def finished(self) -> None:
        with self._flight_lock:
            self._in_flight -= 1

    def live(self) -> int:
        with self._flight_lock:
            return max(1, self._in_flight)


class SessionPerRequest:
    """ASGI wrapper: a request without a session header gets one (the registry ignores its value), and generation
    requests are counted while in flight."""

    GENERATING = ("/chat/completions", "/completions")

    def __init__(self, app: Any, registry: ServeRegistry) -> None:
        self.app, self.registry = app, registry

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        headers = list(scope.get("headers") or [])
        if not any(key.lower() == SESSION_HEADER.encode() for key, _ in headers):
            headers.append((SESSION_HEADER.encode(), SERVE_SESSION.encode()))
        scope = {**scope, "headers": headers}
        counted = str(scope.get("path", "")).endswith(self.GENERATING)
        if counted:
            self.registry.started()
        try:
            await self.app(scope, receive, send)
        finally:
            if counted:
                self.registry.finished()


class ServeServer(GatewayServer):
    """GatewayServer with the per-request session wrapper around its app (the gateway's code is unchanged)."""

    def __init__(self, registry: ServeRegistry, handler: CallHandler, host: str, port: int,
                 token: str | None = None) -> None:
        super().__init__(registry, handler, host, port)
        if token:
            self.token = token

    def _build_server(self, port: int) -> Any:
        server = super()._build_server(port)
        server.config.app = SessionPerRequest(server.config.app, self.registry)  # type: ignore[arg-type]
        return server


class ServeHandler(CallHandler):
    """The gateway's handler, with the request's own temperature / top_p applied."""

    def chat(self, session: Session, body: dict[str, Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
        _request.body = body
        try:
            return super().chat(session, body, *args, **kwargs)  # (the request's headers, where the server passes them)
        finally:
            _request.body = None

    def completion(self, session: Session, body: dict[str, Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
        if check_flag(body, "echo"):
            return self.prompt_logprobs(session, body)
        _request.body = body
        try:
            return super().completion(session, body, *args, **kwargs)
        finally:
            _request.body = None

    def prompt_logprobs(self, session: Session, body: dict[str, Any]) -> dict[str, Any]:
        """`echo: true, max_tokens: 0, logprobs: 0` (vLLM's and OpenAI's legacy convention): the prompt back with
        the raw log-prob of each token given the ones before it (the first has none). An endpoint teacher of
        on-policy distillation scores the student's sampled tokens this way (agentforge/learner/endpoint_teacher.py).
        """
        if body.get("max_tokens") != 0:
            raise RequestError(f"echo=true returns the prompt's log-probs without generating: set max_tokens=0 (got "
                               f"{body.get('max_tokens')!r}); agentforge serve does not echo and generate in one call",
                               "max_tokens")
        logprobs = body.get("logprobs")
        if logprobs is not None and not (isinstance(logprobs, bool) or (is_int(logprobs) and 0 <= logprobs <= 5)):
            raise RequestError(f"logprobs={logprobs!r} must be an integer in [0, 5] (or true/false)", "logprobs")
        ids, _ = self.completion_prompt(body)
        if len(ids) > self.max_model_len:
            raise RequestError(f"the prompt is {len(ids)} tokens: more than the engine's {self.max_model_len} "
                               "(engine.max_model_len)", "prompt", code="context_length_exceeded")
        assert self.batcher is not None
        pending = self.batcher.submit_score(session, ids)
        try:
            scores = pending.result(timeout=self.generate_timeout_s)
        except FutureTimeout:
            pending.cancel()
            raise RequestError(f"the engine did not score the prompt within {self.generate_timeout_s:g} s; retry",
                               status=504, kind="server_error", code="generation_timeout") from None
        decode = self.renderer.tokenizer.decode
        wanted = logprobs is not None and logprobs is not False
        choice = {"index": 0, "text": decode(ids), "finish_reason": "length", "logprobs": {
            "tokens": [decode([t]) for t in ids], "token_logprobs": [None, *(float(x) for x in scores)],
            "top_logprobs": None} if wanted else None}
        return self._envelope("text_completion", choice, ids, 0)


def request_temperature(base: SamplingConfig) -> SamplingConfig:
    """`base` with the running request's temperature and top_p (checked like OpenAI: numbers in range)."""
    body = getattr(_request, "body", None) or {}
    out = base
    for key, low, high in (("temperature", 0.0, 2.0), ("top_p", 0.0, 1.0)):
        value = body.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
            raise RequestError(f"{key}={value!r} must be a number in [{low:g}, {high:g}]", key)
        out = replace(out, **{key: float(value)})
    if out.top_p == 0.0:
        out = replace(out, top_p=1.0, temperature=0.0)  # top_p 0 keeps one token: greedy
    return out


@dataclass
class Served:
    """A running server: `url` + `/v1` is the base_url, `token` the api_key."""

    server: ServeServer
    batcher: GenerationBatcher
    engine: Any
    model_dir: Path
    model_name: str

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def base_url(self) -> str:
        return f"{self.server.url}/v1"

    @property
    def token(self) -> str:
        return self.server.token

    def close(self, engine: bool = True) -> None:
        self.batcher.close()
        self.server.close()
        if engine:
            self.engine.close()


def start(engine: Any, tokenizer: Any, sampling: SamplingConfig, model_dir: Path, model_name: str,
          max_model_len: int, host: str = "127.0.0.1", port: int = 0, token: str | None = None,
          batch_window_s: float = 0.02) -> Served:
    """Serve `engine` (built on `model_dir`) at host:port."""
    from agentforge.agent.render import AgentConfig

    registry = ServeRegistry()
    # the gateway renders prompts itself: no env pool and no env prompt template
    context = RolloutContext(engine, None, None, AgentConfig(sampling=sampling))  # type: ignore[arg-type]
    stats = RolloutStats()

    def current() -> RolloutContext:
        return context

    batcher = GenerationBatcher(current, RolloutHooks(), registry.live, batch_window_s)
    handler = ServeHandler(ChatRenderer(tokenizer), batcher, lambda: request_temperature(sampling), max_model_len,
                           model_name, lambda: stats)
    try:
        server = ServeServer(registry, handler, host, port, token)
    except BaseException:
        batcher.close()
        raise
    return Served(server, batcher, engine, model_dir, model_name)
