"""A fuzz that holds (issue 57, item 7): hypothesis-drawn request bodies and headers against the gateway's real HTTP
server, and drawn `agentforge launch slurm` options and train overrides through the CLI's own checks. Properties:
never a 500, never a traceback, never a hang (every request answers within its timeout); the CLI says a config
error with exit 2 or accepts. `HYPOTHESIS_PROFILE=thorough` draws 2,000 examples a property (tests/fuzz_text.py)."""

from __future__ import annotations

import json
from pathlib import Path

import fuzz_text  # noqa: F401  (the shared hypothesis profiles: `ci` by default)
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_gateway_server import Gateway

pytestmark = pytest.mark.unit

FIELDS = ["messages", "temperature", "top_p", "max_tokens", "max_completion_tokens", "stop", "n", "stream",
          "logprobs", "top_logprobs", "tools", "tool_choice", "seed", "presence_penalty", "prompt", "model"]
scalars = st.one_of(st.none(), st.booleans(), st.integers(min_value=-10**30, max_value=10**30),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=40))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                      max_leaves=12)
messages = st.lists(st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "system", "tool", "developer", "x"]),
     "content": st.one_of(st.text(max_size=60), values)},
    optional={"tool_calls": values, "tool_call_id": values, "name": values}), max_size=4)
bodies = st.fixed_dictionaries({}, optional={"messages": messages, **{f: values for f in FIELDS[1:]}})
headers = st.dictionaries(st.sampled_from(["x-stainless-retry-count", "idempotency-key", "x-session-id"]),
                          st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126), max_size=30),
                          max_size=3)


@pytest.fixture(scope="module")
def gateway(tiny_tokenizer):
    g = Gateway(tiny_tokenizer, max_calls=10**6)
    yield g
    g.close()


@given(body=bodies, sent=headers, path=st.sampled_from(["chat/completions", "completions"]))
def test_drawn_requests_are_answered_never_a_500(gateway, body, sent, path):
    session = gateway.sessions[0]
    raw = json.dumps(body, allow_nan=True).encode()
    response = gateway.post(session, None, raw=raw, headers=sent, path=path)
    assert response.status_code < 500, response.text
    assert "Traceback" not in response.text
    if response.status_code >= 400:
        assert response.json()["error"]["message"]


launch_values = st.one_of(st.text(max_size=20), st.sampled_from(["$(touch PWNED)", "`id`", "a\nb", "1-00:00:00",
                                                                 "gpu", "-1", "0", "99999999999999999999"]))
launch_keys = st.sampled_from(["nodes", "cpus_per_node", "gpus_per_node", "partition", "account", "time", "mem",
                               "constraint", "job_name", "ray_port", "signal_seconds", "extra_sbatch",
                               "learner.lr", "trainer.iterations", "algorithm.lambda", "logger.project", "nope"])


# capsys is read out in each example; each composes the config (~0.4 s): 25 draws in the suite, the profile's under
# HYPOTHESIS_PROFILE=thorough
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture],
          max_examples=25 if settings.default.max_examples <= 60 else settings.default.max_examples)
@given(options=st.lists(st.tuples(launch_keys, launch_values), max_size=4))
def test_drawn_launch_options_are_a_config_error_or_a_script(options, capsys, tmp_path_factory, monkeypatch):
    from agentforge.cli import main

    monkeypatch.chdir(tmp_path_factory.mktemp("launch"))
    args = ["launch", "slurm", "recipe=debug", *(f"{k}={v}" for k, v in options), "--dry-run"]
    try:
        status = main(args)
    except SystemExit as stop:  # Hydra's own exits count as answers, never as tracebacks
        status = int(stop.code or 0)
    captured = capsys.readouterr()
    assert status in (0, 2), captured.err
    assert "Traceback" not in captured.err
    assert not Path("PWNED").exists()
    if status == 0:
        assert captured.out.startswith("#!/bin/bash")
