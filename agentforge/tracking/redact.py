"""Secrets stay home: a config value whose key names a key, token, secret or password is written as `<redacted>`
in every record a run leaves (its config.yaml, Hydra's `.hydra/` copies, wandb's config), so a run dir, a wandb
project or an export's model card can be shared without the API key an override carried.

A key is secret when one of its `_`/`-` separated words is one of SECRET_WORDS (`hf_token`, `openai_api_key`,
`judge.password`), so `max_new_tokens` or `task_key_version` are not. The running process keeps the real value.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import yaml

SECRET_WORDS = frozenset({"key", "apikey", "token", "secret", "password", "passwd", "credential", "credentials"})
REDACTED = "<redacted>"


def is_secret_key(key: Any) -> bool:
    last = str(key).rsplit(".", 1)[-1].lstrip("+~")
    return any(word in SECRET_WORDS for word in re.split(r"[_\-]", last.lower()))


def redact_override(text: str) -> str:
    """`a.b.api_key=sk-…` → `a.b.api_key=<redacted>`; other overrides unchanged."""
    key, sep, value = text.partition("=")
    return f"{key}={REDACTED}" if sep and value and is_secret_key(key) else text


def redact(value: Any) -> Any:
    """A config (dicts, lists, override strings) with secret values replaced; a new object, the input untouched."""
    if isinstance(value, dict):
        return {k: REDACTED if is_secret_key(k) and isinstance(v, str) and v else redact(v) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v) for v in value]
    if isinstance(value, str) and "=" in value:  # an override, or Hydra's comma-joined override_dirname
        return ",".join(redact_override(piece) for piece in value.split(","))
    return value


def redact_hydra_files(run_dir: Path) -> None:
    """Rewrite Hydra's copies of the config and the overrides (`.hydra/*.yaml`) without their secrets."""
    for path in sorted((run_dir / ".hydra").glob("*.yaml")):
        loaded = yaml.safe_load(path.read_text())
        cleaned = redact(loaded)
        if cleaned != loaded:
            path.write_text(yaml.safe_dump(cleaned, sort_keys=False))


def secret_values(extra: dict[str, Any] | None = None) -> list[str]:
    """The values a text must not carry: this process's environment variables with secret names (OPENAI_API_KEY,
    HF_TOKEN, WANDB_API_KEY ...) and `extra`'s secret keys, 8 characters or longer (shorter ones would match
    ordinary words), longest first."""
    found = {v for k, v in os.environ.items() if is_secret_key(k) and len(v) >= 8}

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                if is_secret_key(k) and isinstance(v, str) and len(v) >= 8:
                    found.add(v)
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    walk(extra or {})
    return sorted(found, key=len, reverse=True)


def redact_text(text: str, extra: dict[str, Any] | None = None) -> str:
    """`text` (an agent's traceback, an error message) with every secret value replaced by `<redacted>`."""
    for value in secret_values(extra):
        text = text.replace(value, REDACTED)
    return text
