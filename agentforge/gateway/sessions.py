"""Sessions: one per episode. A session keeps every model call it made (the request's messages, the prompt ids the
engine saw, the ids and log-probs it sampled, the reply returned) so a later request that repeats an earlier reply
is matched to its sampled tokens, never re-encoded (`rendering.ChatRenderer.extend`).

Each session has its own bearer token (`Session.token`, the `api_key` its agent is given): a request naming a
session must carry that session's token (403 otherwise), so a session's records can only come from its own agent."""

from __future__ import annotations

import secrets
import threading
from dataclasses import dataclass, field, replace
from typing import Any

from agentforge.gateway.errors import ended_session, unknown_session
from agentforge.gateway.rendering import ChatRenderer, PromptBuild, normalise_messages
from agentforge.rollout.workflow import Episode
from agentforge.types import Completion


@dataclass
class CallRecord:
    """One model call of a session, exactly as the engine ran it."""

    messages: list[dict[str, Any]]  # normalised request messages
    tools: list[dict[str, Any]]
    prompt: PromptBuild
    completion: Completion
    reply: dict[str, Any]  # normalised assistant message returned (content, tool_calls)
    finish_reason: str
    carry: str = ""  # reply text the client was given beyond `completion.token_ids` (a stop string cut a token)
    request_key: str = ""  # the request body, canonical JSON: an identical retry is answered with `response`
    response: dict[str, Any] | None = None  # the OpenAI response returned
    idempotency_key: str | None = None  # the request's Idempotency-Key header


@dataclass
class Session:
    """The gateway's view of one episode: its calls, and whether it still takes requests."""

    id: str
    episode: Episode
    max_calls: int
    calls: list[CallRecord] = field(default_factory=list)
    ended: str | None = None  # why it no longer takes requests
    lock: threading.Lock = field(default_factory=threading.Lock)
    token: str = field(default_factory=lambda: secrets.token_urlsafe(24))  # this session's bearer token
    replays: int = 0  # retries answered with an earlier response (no turn added)

    def check_open(self) -> None:
        if self.ended is not None:
            raise ended_session(self.id, self.ended)


def reply_matches(sent: dict[str, Any], recorded: dict[str, Any]) -> bool:
    """Whether the assistant message a client sent back is the reply the gateway returned (text and tool calls by
    value; a client may drop the content of a tool-calling reply or re-serialise its arguments)."""
    if sent.get("role") != "assistant":
        return False
    sent_calls = [(c["name"], c["arguments"]) for c in sent.get("tool_calls", [])]
    recorded_calls = [(c["name"], c["arguments"]) for c in recorded.get("tool_calls", [])]
    if sent_calls != recorded_calls:
        return False
    return sent["content"].strip() == recorded["content"].strip() or (bool(recorded_calls) and not sent["content"])


def strip_ids(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages compared without tool-call ids (some clients rewrite them)."""
    out = []
    for m in messages:
        m = {k: v for k, v in m.items() if k != "tool_call_id"}
        if "tool_calls" in m:
            m["tool_calls"] = [{k: v for k, v in c.items() if k != "id"} for c in m["tool_calls"]]
        out.append(m)
    return out


def build_prompt(renderer: ChatRenderer, session: Session, messages: list[dict[str, Any]],
                 tools: list[dict[str, Any]]) -> PromptBuild:
    """The call's prompt ids: an extension of the newest earlier call whose messages and reply this request repeats,
    else rendered from scratch (flagged when the session had calls: the client edited or dropped its history)."""
    if not session.calls:
        return renderer.fresh(messages, tools)
    wanted = strip_ids(messages)
    for index in range(len(session.calls) - 1, -1, -1):  # the same request again (a new sample): the same prompt
        call = session.calls[index]
        if call.tools == tools and len(call.messages) == len(messages) and strip_ids(call.messages) == wanted:
            return replace(call.prompt, repeats=index, reencoded=None)
    for index in range(len(session.calls) - 1, -1, -1):
        call = session.calls[index]
        k = len(call.messages)
        if (len(messages) > k and call.tools == tools and strip_ids(call.messages) == wanted[:k]
                and reply_matches(messages[k], call.reply)):
            built = renderer.extend(messages, tools, k, call.prompt.ids, call.completion.token_ids, call.carry)
            if built is not None:
                built.base = index
                return built
            return renderer.fresh(messages, tools, why="the chat template does not render this conversation as an "
                                                       "extension of the earlier call")
    return renderer.fresh(messages, tools, why="the messages repeat no earlier call of this session with its reply "
                                               "(history edited, truncated or reordered)")


class SessionRegistry:
    """The live sessions by id (thread-safe: HTTP handlers and the workflow both use it)."""

    def __init__(self) -> None:
        self._sessions: dict[str, Session] = {}
        self._ended: dict[str, str] = {}  # sessions of finished runs: id -> why (bounded)
        self._owners: dict[str, str] = {}  # bearer token -> its session's id (kept, bounded, after the session ends)
        self._lock = threading.Lock()

    def open(self, episode: Episode, max_calls: int) -> Session:
        session = Session(id=f"ep{episode.slot}-{secrets.token_hex(4)}", episode=episode, max_calls=max_calls)
        with self._lock:
            self._sessions[session.id] = session
            self._owners[session.token] = session.id
        return session

    def owner(self, token: str) -> str | None:
        """The id of the session `token` belongs to (None: no session's)."""
        with self._lock:
            return self._owners.get(token)

    def get(self, session_id: str) -> Session:
        with self._lock:
            session = self._sessions.get(session_id)
            ended = self._ended.get(session_id)
        if ended is not None:
            raise ended_session(session_id, ended)
        if session is None:
            raise unknown_session(session_id)
        return session

    def end(self, session: Session, why: str) -> None:
        with session.lock:
            if session.ended is None:
                session.ended = why

    def live(self) -> int:
        with self._lock:
            return sum(s.ended is None for s in self._sessions.values())

    def forget(self, sessions: list[Session]) -> None:
        """Drop the sessions of a finished run; a late request of one (a hung agent's) still hears why it ended."""
        with self._lock:
            for s in sessions:
                self._sessions.pop(s.id, None)
                self._ended[s.id] = s.ended or "its run finished"
            while len(self._ended) > 100_000:
                self._ended.pop(next(iter(self._ended)))
            while len(self._owners) > 100_000 + len(self._sessions):
                self._owners.pop(next(iter(self._owners)))


__all__ = ["CallRecord", "Session", "SessionRegistry", "build_prompt", "normalise_messages", "reply_matches"]
