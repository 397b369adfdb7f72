"""The HTTP server: OpenAI's API in front of the rollout engine, one session per episode.

Routes (every one also under `/sessions/<id>`, which is how an unmodified client names its session: only its
`base_url` changes; or send the header `X-Session-Id`):

    POST /v1/chat/completions    messages, tools / tool_choice, max_tokens / max_completion_tokens, stop, logprobs
    POST /v1/completions         prompt (text or token ids), max_tokens, stop, logprobs
    GET  /v1/models              the policy being trained

Bound to 127.0.0.1 on a free port by default. Credentials: every session has its own bearer token (the `api_key` its
agent is given; `Authorization: Bearer <token>`), valid for that session only (another session's token: 403), and a
request with a session token alone is that session's. The server's own token (`GatewayServer.token`, never given to
an agent) is the operator's: every route, every session. Errors are OpenAI error objects; a 4xx carries
`x-should-retry: false` (the openai SDK would otherwise retry a 409 or 429 that cannot succeed). Handlers run in a
thread pool sized for every session at once, so calls of all sessions meet in the batcher.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import secrets
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from agentforge.errors import AgentforgeError
from agentforge.gateway.calls import CallHandler
from agentforge.gateway.errors import RequestError
from agentforge.gateway.sessions import SessionRegistry

log = logging.getLogger("agentforge.gateway")
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


def http_url(host: str, port: int) -> str:
    """`http://host:port`, an IPv6 address in brackets (`http://[::1]:8000`)."""
    return f"http://[{host}]:{port}" if ":" in host and not host.startswith("[") else f"http://{host}:{port}"
SESSION_HEADER = "x-session-id"
MAX_BODY_BYTES = 16 * 1024**2  # a request body over this is refused (413) while it streams in


class GatewayServer:
    """uvicorn serving the gateway's FastAPI app in a daemon thread."""

    def __init__(self, registry: SessionRegistry, handler: CallHandler, host: str = "127.0.0.1", port: int = 0,
                 max_concurrency: int = 512, max_body_bytes: int = MAX_BODY_BYTES) -> None:
        self.registry, self.handler, self.host = registry, handler, host
        self.max_body_bytes = int(max_body_bytes)
        self.token = secrets.token_urlsafe(24)
        self.executor = ThreadPoolExecutor(max_workers=max_concurrency, thread_name_prefix="agentforge-gateway")
        self._server = self._build_server(port)
        self._thread = threading.Thread(target=self._server.run, name="agentforge-gateway-http", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise AgentforgeError(f"the gateway could not listen on {host}:{port} (is the port taken? set "
                                      "env.port=0 for a free one)")
            time.sleep(0.01)
        self.port = int(self._server.servers[0].sockets[0].getsockname()[1])

    @property
    def url(self) -> str:
        return http_url(self.host, self.port)

    def base_url(self, session_id: str) -> str:
        return f"{self.url}/sessions/{session_id}/v1"

    def close(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self.executor.shutdown(wait=False, cancel_futures=True)

    async def _read_body(self, request: Request) -> bytes:
        """The body, refused (413) as soon as it passes `max_body_bytes`: a 2 GB request never reaches memory."""
        limit = self.max_body_bytes
        too_large = RequestError(f"the request body is over the gateway's limit of {limit} bytes (env.max_body_mb); "
                                 "send a shorter conversation", status=413, code="request_too_large")
        declared = request.headers.get("content-length", "")
        if declared.isascii() and declared.isdigit() and (len(declared) > 18 or int(declared) > limit):
            raise too_large
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise too_large
            chunks.append(chunk)
        return b"".join(chunks)

    # -------------------------------------------------------------------------------------------------- app
    def _build_server(self, port: int) -> Any:
        # (FastAPI reads the handlers' annotations by name: Request must be a module-level import)
        app = FastAPI(title="agentforge gateway", docs_url=None, redoc_url=None)

        def error(exc: RequestError) -> JSONResponse:
            headers = {"x-should-retry": "false"} if exc.status < 500 else None
            return JSONResponse(exc.body(), status_code=exc.status, headers=headers)

        async def serve(request: Request, session_id: str | None, method: str) -> JSONResponse:
            try:
                owner = self._authorise(request)
                sid = session_id or request.headers.get(SESSION_HEADER) or owner
                if not sid:
                    raise RequestError("no session: use the base_url the agent was given (/sessions/<id>/v1) or "
                                       f"send the header {SESSION_HEADER}", status=404, code="session_not_found")
                if owner is not None and sid != owner:
                    raise RequestError(f"this api_key belongs to another session than {sid!r}: each agent may "
                                       "call only its own session (use the base_url and api_key it was given)",
                                       status=403, kind="permission_error", code="wrong_session")
                session = self.registry.get(sid)
                raw = await self._read_body(request)
                try:
                    body = json.loads(raw)
                except (ValueError, RecursionError) as exc:
                    why = "nested too deeply" if isinstance(exc, RecursionError) else "not JSON"
                    raise RequestError(f"the request body is {why}; send one JSON object") from None
                if not isinstance(body, dict):
                    raise RequestError("the request body must be a JSON object")
                run = functools.partial(getattr(self.handler, method), session, body, request.headers)
                result = await asyncio.get_running_loop().run_in_executor(self.executor, run)
                return JSONResponse(result)
            except RequestError as exc:
                return error(exc)
            except RecursionError:
                return error(RequestError("the request is nested too deeply to be read; send flatter JSON"))
            except Exception:  # noqa: BLE001  (an OpenAI-style 500, never a dead server)
                request_id = uuid.uuid4().hex[:16]
                log.exception("gateway: request %s failed", request_id)
                return error(RequestError(f"the gateway failed on this request (request id {request_id}; the "
                                          "trainer's log has the error under that id)", status=500,
                                          kind="server_error", code=request_id))

        def models(request: Request) -> JSONResponse:
            try:
                self._authorise(request)
            except RequestError as exc:
                return error(exc)
            return JSONResponse({"object": "list", "data": [{"id": self.handler.model_name, "object": "model",
                                                              "created": 0, "owned_by": "agentforge"}]})

        for prefix in ("", "/sessions/{session_id}"):
            app.add_api_route(f"{prefix}/v1/models", models, methods=["GET"])

        async def chat(request: Request, session_id: str | None = None) -> JSONResponse:
            return await serve(request, session_id, "chat")

        async def completions(request: Request, session_id: str | None = None) -> JSONResponse:
            return await serve(request, session_id, "completion")

        for prefix in ("", "/sessions/{session_id}"):
            app.add_api_route(f"{prefix}/v1/chat/completions", chat, methods=["POST"])
            app.add_api_route(f"{prefix}/v1/completions", completions, methods=["POST"])
        config = uvicorn.Config(app, host=self.host, port=port, log_level="warning", access_log=False,
                                lifespan="off", timeout_keep_alive=30)
        # run in a non-main thread, uvicorn installs no signal handlers: the trainer keeps SIGTERM/SIGUSR1 (checkpoint
        # and exit)
        return uvicorn.Server(config)

    def _authorise(self, request: Any) -> str | None:
        """The id of the session the bearer token belongs to, None for the server's own token; else a 401."""
        header = request.headers.get("authorization", "")
        token = header[len("Bearer "):] if header.startswith("Bearer ") else ""
        if token and secrets.compare_digest(token.encode(), self.token.encode()):
            return None
        owner = self.registry.owner(token) if token else None
        if owner is None:
            raise RequestError("missing or wrong bearer token: use the api_key the agent was given", status=401,
                               kind="authentication_error", code="invalid_api_key")
        return owner
