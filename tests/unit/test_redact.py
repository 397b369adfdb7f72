"""Secrets stay home (issue 57, item 6): a value whose key names a key, token, secret or password never lands in a
run's config.yaml, Hydra's `.hydra/` copies or wandb's config; everything else is written as before."""

from __future__ import annotations

import pytest
import yaml
from omegaconf import OmegaConf

from agentforge.tracking.redact import REDACTED, is_secret_key, redact

pytestmark = pytest.mark.unit

SECRET = "sk-live-0123456789abcdef"


@pytest.mark.parametrize(("key", "secret"), [
    ("api_key", True), ("env.judge.openai_api_key", True), ("+env.hf_token", True), ("token", True),
    ("db-password", True), ("client_secret", True), ("max_new_tokens", False), ("max_prompt_tokens", False),
    ("keys", False), ("monkey", False), ("task", False), ("sync_backend", False),
])
def test_which_keys_are_secret(key, secret):
    assert is_secret_key(key) is secret


def test_redact_keeps_the_input_and_leaves_other_values(tmp_path):
    config = {"env": {"api_key": SECRET, "max_new_tokens": 64, "token": None}, "overrides": [f"+env.api_key={SECRET}",
                                                                                           "trainer.iterations=2"]}
    cleaned = redact(config)
    assert cleaned == {"env": {"api_key": REDACTED, "max_new_tokens": 64, "token": None},
                       "overrides": [f"+env.api_key={REDACTED}", "trainer.iterations=2"]}
    assert config["env"]["api_key"] == SECRET  # the running process keeps the real value


def test_a_run_dir_holds_no_secret(tmp_path):
    from agentforge.commands.builders import prepare_run_dir

    run = tmp_path / "run"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump([f"+env.api_key={SECRET}", "seed=1"]))
    (run / ".hydra" / "hydra.yaml").write_text(yaml.safe_dump(
        {"hydra": {"job": {"override_dirname": f"+env.api_key={SECRET},seed=1"}}}))
    cfg = OmegaConf.create({"run_dir": str(run), "seed": 1, "env": {"name": "search_qa", "api_key": SECRET}})
    prepare_run_dir(cfg)
    for path in [run / "config.yaml", *(run / ".hydra").iterdir()]:
        assert SECRET not in path.read_text(), path
    assert yaml.safe_load((run / "config.yaml").read_text())["env"] == {"name": "search_qa", "api_key": REDACTED}
    assert yaml.safe_load((run / ".hydra" / "overrides.yaml").read_text()) == [f"+env.api_key={REDACTED}", "seed=1"]
    assert cfg.env.api_key == SECRET


def test_wandb_records_the_config_without_its_secrets(tmp_path):
    pytest.importorskip("wandb")
    from agentforge.tracking.tracker import RunTracker

    tracker = RunTracker(tmp_path, {"wandb": True, "wandb_mode": "offline", "jsonl": True},
                         {"env": {"api_key": SECRET, "name": "search_qa"}}, resume=False)
    tracker.log(0, {"train/loss": 1.0})
    tracker.close()
    written = [p for p in (tmp_path / "wandb").rglob("*") if p.is_file()]
    assert written and not any(SECRET.encode() in p.read_bytes() for p in written)


def test_an_agent_traceback_kept_in_a_trajectory_loses_the_secrets_it_printed(monkeypatch):
    from agentforge.tracking.redact import redact_text

    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("SHORT_TOKEN", "abc")  # too short to tell from a word: left
    trace = f"Traceback ...\nopenai.AuthenticationError: key {SECRET} refused; judge pass hunter2-but-long abc"
    cleaned = redact_text(trace, {"judge": {"password": "hunter2-but-long"}})
    assert SECRET not in cleaned and "hunter2-but-long" not in cleaned and cleaned.count(REDACTED) == 2
    assert cleaned.endswith(" abc")
