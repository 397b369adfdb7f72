"""The examples' HTTP client for the openai SDK: one per episode, as any agent makes it, but sharing one TLS context.

Why: `AsyncOpenAI(...)` builds an httpx client, which loads the CA bundle into a new SSL context: 40-100 ms of CPU
per client on these machines (measured), more than the gateway's own work for a call, paid by every episode of an
agent that makes a client per episode, and serialised with everything else by the GIL. One context, made once and
shared (verification unchanged), makes a client cost under a millisecond. Any agent can do the same.
"""

from __future__ import annotations

import functools
import ssl
from typing import Any


@functools.cache
def tls_context() -> ssl.SSLContext:
    import certifi

    return ssl.create_default_context(cafile=certifi.where())


def http_client() -> Any:
    """An httpx.AsyncClient with the openai SDK's defaults and the shared TLS context (`http_client=` of
    AsyncOpenAI)."""
    from openai import DefaultAsyncHttpxClient

    return DefaultAsyncHttpxClient(verify=tls_context())

