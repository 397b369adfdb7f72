"""Errors the gateway returns to a client, shaped as OpenAI's error objects so any client library reports them."""

from __future__ import annotations

from typing import Any


class RequestError(Exception):
    """A request the gateway refuses: the message names the problem and its fix; `status` is the HTTP code."""

    def __init__(self, message: str, param: str | None = None, status: int = 400,
                 kind: str = "invalid_request_error", code: str | None = None) -> None:
        super().__init__(message)
        self.message, self.param, self.status, self.kind, self.code = message, param, status, kind, code

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


def unknown_session(session_id: str) -> RequestError:
    return RequestError(f"unknown session {session_id!r}: sessions are created by the trainer for each episode; use "
                        "the base_url the agent was given", status=404, code="session_not_found")


def ended_session(session_id: str, why: str) -> RequestError:
    return RequestError(f"session {session_id!r} has ended ({why}); its episode is over and no further model call "
                        "is trained", status=409, code="session_ended")
