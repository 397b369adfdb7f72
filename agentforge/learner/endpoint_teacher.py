"""An on-policy distillation teacher served behind an OpenAI-compatible completions endpoint (`learner.teacher.url`):
`agentforge serve` of an exported run, or a vLLM server holding a model too large to sit beside the learner.

Why from the trainer and not the learner's ranks: the teacher is a server, so nothing of it is loaded here; each
sample's token ids (prompt and response) go to `/completions` as the prompt with `echo: true, max_tokens: 0,
logprobs: 0` (vLLM's and OpenAI's legacy convention), `concurrency` requests at a time, and the log-probs of the
response positions come back. A server with a prefix cache (vLLM's) computes an episode's shared prefix once. Those
log-probs are raw (temperature 1), so the student must sample at 1 (`LearnerConfig` refuses another temperature).

The tokenizers are checked at start as far as a server shows them: a probe of the student's token ids (text, digits,
the chat template's special tokens) is echoed, and each token the server names must be the student's decoding of it.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from agentforge.errors import AgentforgeError, ConfigError
from agentforge.learner.batch import TurnSample

PROBE_TEXT = ("The quick brown fox jumps over 13 lazy dogs; 0123456789 + -*/=\n<think>left of the box</think>"
              "<action>push up</action> Ünïcödé 東京 ✓")


class EndpointTeacher:
    """`logprobs(samples)`: the served teacher's log-prob of each sample's response tokens (float32 arrays)."""

    def __init__(self, settings: Any, student_path: str | Path) -> None:
        self.url = str(settings.url).rstrip("/")
        self.settings = settings
        key = os.environ.get(settings.api_key_env) if settings.api_key_env else None
        if settings.api_key_env and not key:
            raise ConfigError(f"learner.teacher.api_key_env={settings.api_key_env!r}, but that environment variable "
                              "is not set; export it (agentforge serve prints its token), or set api_key_env=null "
                              "for an endpoint without a key")
        self.headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
        self.model = settings.model or self._first_model()
        self.seconds = 0.0  # time spent waiting on the endpoint (the trainer reports it as time/teacher)
        check_endpoint_tokenizer(self, student_path)

    def logprobs(self, samples: Sequence[TurnSample]) -> list[np.ndarray]:
        started = time.perf_counter()
        with ThreadPoolExecutor(max_workers=max(1, int(self.settings.concurrency))) as pool:
            out = list(pool.map(self._response_logprobs, samples))
        self.seconds += time.perf_counter() - started
        return out

    def echo(self, ids: Sequence[int]) -> tuple[list[str], list[float | None]]:
        """The endpoint's tokens and log-probs of `ids` as a prompt (the first log-prob is None)."""
        answer = self._post("/completions", {"model": self.model, "prompt": [int(t) for t in ids], "echo": True,
                                             "max_tokens": 0, "logprobs": 0, "temperature": 1.0})
        try:
            logprobs = answer["choices"][0]["logprobs"]
            tokens, values = list(logprobs["tokens"]), list(logprobs["token_logprobs"])
        except (KeyError, IndexError, TypeError) as error:
            raise AgentforgeError(f"teacher {self.url}: the echo of a prompt came back without choices[0].logprobs "
                                  f"({type(error).__name__}: {error}); the endpoint must return prompt log-probs for "
                                  "echo=true, max_tokens=0, logprobs=0 (agentforge serve and vLLM do)") from None
        if len(values) < len(ids):
            raise AgentforgeError(f"teacher {self.url}: {len(values)} log-probs for a prompt of {len(ids)} tokens; the "
                                  "endpoint did not echo the prompt token for token")
        return tokens[: len(ids)], values[: len(ids)]

    def _response_logprobs(self, sample: TurnSample) -> np.ndarray:
        _, values = self.echo(sample.input_ids)
        response = values[sample.prompt_len :]
        if any(v is None for v in response):
            raise AgentforgeError(f"teacher {self.url}: no log-prob for a response token (position >= "
                                  f"{sample.prompt_len}); the endpoint must score every prompt token after the first")
        return np.asarray(response, np.float32)

    def _first_model(self) -> str:
        models = self._request(urllib.request.Request(self.url + "/models", headers=self.headers))
        try:
            return str(models["data"][0]["id"])
        except (KeyError, IndexError, TypeError):
            raise AgentforgeError(f"teacher {self.url}/models lists no model; name one: learner.teacher.model=<name>"
                                  ) from None

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._request(urllib.request.Request(self.url + path, json.dumps(body).encode(), self.headers,
                                                    method="POST"))

    def _request(self, request: urllib.request.Request) -> dict[str, Any]:
        try:
            with urllib.request.urlopen(request, timeout=float(self.settings.timeout_s)) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as error:
            detail = error.read().decode(errors="replace")[:300]
            raise AgentforgeError(f"teacher {request.full_url}: HTTP {error.code}: {detail}") from None
        except (urllib.error.URLError, TimeoutError, OSError, ValueError) as error:
            raise AgentforgeError(f"teacher {request.full_url}: {type(error).__name__}: {error}; is the server up "
                                  "(learner.teacher.url)?") from None


def probe_ids(tokenizer: Any) -> list[int]:
    """Token ids of varied text wrapped in the student's chat template (its special tokens included)."""
    messages = [{"role": "system", "content": "probe"}, {"role": "user", "content": PROBE_TEXT}]
    try:
        ids = tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=True)
    except Exception:  # noqa: BLE001  (a tokenizer without a chat template: the text alone)
        ids = tokenizer.encode(PROBE_TEXT, add_special_tokens=False)
    if isinstance(ids, Mapping):  # a BatchEncoding (newer transformers)
        ids = ids["input_ids"]
    return [int(t) for t in ids]


def check_endpoint_tokenizer(teacher: EndpointTeacher, student_path: str | Path) -> None:
    """Refuse a served teacher whose tokens differ from the student's for the same ids."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(student_path))
    ids = probe_ids(tokenizer)
    tokens, _ = teacher.echo(ids)
    mine = [tokenizer.decode([t]) for t in ids]
    wrong = [(t, ours, theirs) for t, ours, theirs in zip(ids, mine, tokens, strict=True) if ours != theirs]
    if wrong:
        t, ours, theirs = wrong[0]
        raise ConfigError(f"the teacher at {teacher.url} (model {teacher.model!r}) does not share the student's "
                          f"tokenizer ({student_path}): {len(wrong)} of {len(ids)} probe tokens differ, e.g. id {t} is "
                          f"{theirs!r} there and {ours!r} here; distillation scores one sequence of token ids for "
                          "both: serve a teacher of the student's family")
