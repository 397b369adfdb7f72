"""`agentforge serve <checkpoint | run dir | exported dir> [engine=vllm|hf] [host=] [port=] [token=] ...`."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentforge.errors import ConfigError
from agentforge.export.options import dtype_name, parse_args
from agentforge.export.source import EXPORT_META, ExportError
from agentforge.gateway.server import LOOPBACK_HOSTS
from agentforge.types import SamplingConfig

OPTIONS = {
    "engine": "vllm (default where vllm is installed) | hf (transformers generate)",
    "host": "the address to listen on (default 127.0.0.1: this machine only)",
    "port": "the port (default 8000; 0: a free one)",
    "token": "the bearer token clients must send as api_key (default: $AGENTFORGE_SERVE_TOKEN, else a random one)",
    "dtype": "bf16 | fp16 | fp32 (default: the model's)",
    "max_model_len": "the engine's context length (default: the run's engine.max_model_len, else 4096)",
    "max_tokens": "the most new tokens a request may ask for (default: the run's agent.sampling.max_new_tokens)",
    "temperature": "the default temperature when a request gives none (default: the run's; 0: greedy)",
    "model_name": "the model id in /v1/models and replies (default agentforge-policy)",
    "kv_cache_gb": "vLLM on a CPU: the KV cache in GiB (default 1)",
}

USAGE = """usage: agentforge serve <exported dir | checkpoint dir | run dir> [key=value ...]

The gateway's OpenAI-compatible API on a trained policy, for inference: POST /v1/chat/completions (messages, tools
and tool_choice, the same Hermes <tool_call> format the policy was trained in), POST /v1/completions, GET /v1/models.
Listens on 127.0.0.1 and asks every request for the bearer token it prints (clients pass it as api_key). A checkpoint
or run dir is exported to a temporary folder first (LoRA merged), exactly as `agentforge export` would. Ctrl-C stops.

options:
{options}

examples:
  agentforge serve runs/train/<time>/export/iter_000010
  agentforge serve runs/train/<time> engine=hf port=8001
  OPENAI_BASE_URL=http://127.0.0.1:8000/v1 OPENAI_API_KEY=<printed token> python my_agent.py
"""


def usage() -> str:
    return USAGE.format(options="\n".join(f"  {k + '=':15} {v}" for k, v in OPTIONS.items()))


@dataclass
class ServeModel:
    """The folder to serve and what its export recorded."""

    folder: Path
    meta: dict[str, Any] = field(default_factory=dict)
    temporary: Path | None = None  # a checkpoint exported for this server: deleted when it stops

    def cleanup(self) -> None:
        if self.temporary is not None:
            shutil.rmtree(self.temporary, ignore_errors=True)


def resolve_model_dir(path: str, dtype: str | None = None) -> ServeModel:
    """An exported (or any HF) folder as it is; a checkpoint or run dir exported into a temporary folder."""
    folder = Path(path).expanduser()
    if folder.is_dir() and (folder / "config.json").is_file() and not (folder / "trainer_state.json").exists():
        meta_file = folder / EXPORT_META
        meta = json.loads(meta_file.read_text()) if meta_file.is_file() else {}
        return ServeModel(folder, meta)
    if folder.is_dir() and (folder / "adapter_config.json").is_file():
        raise ExportError(f"{path} is a LoRA adapter without merged weights; serve the checkpoint it came from, or "
                          f"export it merged (agentforge export <checkpoint>) and serve that")
    from agentforge.export.source import locate
    from agentforge.export.writer import export_model

    info = locate(path)
    temporary = Path(tempfile.mkdtemp(prefix="agentforge-serve-"))
    try:
        result = export_model(info, temporary / "model", dtype=dtype)
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise
    print(f"agentforge: serving {result.what}", file=sys.stderr, flush=True)
    return ServeModel(result.out, result.meta, temporary)


def sampling_of(meta: dict[str, Any], options: dict[str, str]) -> SamplingConfig:
    sampling = dict(meta.get("sampling") or {})
    base = SamplingConfig(**{k: sampling[k] for k in ("temperature", "top_p", "top_k", "max_new_tokens", "stop",
                                                       "presence_penalty", "repetition_penalty") if k in sampling})
    if options.get("max_tokens"):
        base.max_new_tokens = _int(options, "max_tokens")
    if options.get("temperature"):
        base.temperature = float(options["temperature"])
    return base


def _int(options: dict[str, str], key: str) -> int:
    try:
        return int(options[key])
    except ValueError:
        raise ConfigError(f"{key}={options[key]}: expected an integer") from None


def build_engine(model: ServeModel, engine: str, dtype: str, max_model_len: int, kv_cache_gb: float) -> Any:
    from agentforge.engines import make_engine
    from agentforge.models.loading import ModelSpec

    spec = ModelSpec(path=str(model.folder), name=model.folder.name, dtype=dtype)
    if engine == "vllm":
        return make_engine("vllm", spec, {"dtype": dtype, "max_model_len": max_model_len,
                                          "kv_cache_space_gb": kv_cache_gb, "seed": 0})
    if engine == "hf":
        return make_engine("hf", spec, {"dtype": dtype, "seed": 0})
    raise ConfigError(f"engine={engine}: valid engines: vllm, hf")


def default_engine() -> str:
    import importlib.util

    return "vllm" if importlib.util.find_spec("vllm") is not None else "hf"


def serve_command(args: list[str]) -> int:
    if not args or any(a in ("-h", "--help", "help") for a in args):
        print(usage())
        return 0
    from agentforge.models.loading import ModelSpec, load_tokenizer
    from agentforge.serving.server import start

    path, options = parse_args(args, OPTIONS, "serve")
    host = options.get("host") or "127.0.0.1"
    port = _int(options, "port") if options.get("port") else 8000
    engine_name = options.get("engine") or default_engine()
    model = resolve_model_dir(path, dtype_name(options.get("dtype"), "") or None)
    try:
        config = json.loads((model.folder / "config.json").read_text())
        dtype = dtype_name(options.get("dtype"), str(config.get("dtype") or config.get("torch_dtype") or "float32"))
        max_len = _int(options, "max_model_len") if options.get("max_model_len") else int(
            model.meta.get("max_model_len") or 4096)
        sampling = sampling_of(model.meta, options)
        engine = build_engine(model, engine_name, dtype, max_len, float(options.get("kv_cache_gb") or 1))
        tokenizer = getattr(engine, "tokenizer", None) or load_tokenizer(
            ModelSpec(path=str(model.folder), name=model.folder.name, dtype=dtype))
        token = given_token(options.get("token") or os.environ.get("AGENTFORGE_SERVE_TOKEN") or None)
        served = start(engine, tokenizer, sampling, model.folder, options.get("model_name") or "agentforge-policy",
                       max_len, host=host, port=port, token=token)
        if host not in LOOPBACK_HOSTS:
            print(f"agentforge: warning: listening on {host}: reachable from other machines (the bearer token is "
                  "the only guard; HTTP is not encrypted)", file=sys.stderr)
        print(f"serving {model.folder} ({engine_name}, {dtype}) at {served.base_url}\n"
              f"  OPENAI_BASE_URL={served.base_url}\n  OPENAI_API_KEY="
              f"{'(the token you gave)' if token else served.token}\n"
              f"  model: {served.model_name} · sampling: temperature {sampling.temperature}, max_tokens "
              f"{sampling.max_new_tokens} · Ctrl-C stops", flush=True)
        wait_for_stop()
        served.close()
    finally:
        model.cleanup()
    return 0


MIN_TOKEN_CHARS = 16


def given_token(token: str | None) -> str | None:
    """A token the user chose, refused when short enough to guess; None: the server makes a random one (printed;
    a given one is never printed: it may be in a shell history or a log already, not in this one)."""
    if token is not None and len(token) < MIN_TOKEN_CHARS:
        raise ConfigError(f"agentforge serve: the token is {len(token)} characters; use at least {MIN_TOKEN_CHARS} "
                          "(e.g. python -c 'import secrets; print(secrets.token_urlsafe(24))'), or give none for a "
                          "random one")
    return token


def wait_for_stop() -> None:
    """Block until Ctrl-C or SIGTERM."""
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        while not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
