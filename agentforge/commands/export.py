"""`agentforge export <run dir | checkpoint dir> [out=DIR] [adapter_only=true] [dtype=bf16|fp16|fp32]
[base=DIR] [push_to_hub=<user>/<name>]`."""

from __future__ import annotations

import sys
from pathlib import Path

from agentforge.export.options import dtype_name, flag, parse_args

OPTIONS = {
    "out": "the folder to write (default <run dir>/export/iter_<N>); refused when it exists and is not empty",
    "adapter_only": "true: the peft LoRA adapter with its base named, not merged weights (LoRA runs only)",
    "dtype": "bf16 | fp16 | fp32 (default: the checkpoint's own dtype)",
    "base": "the base model folder of a LoRA checkpoint whose recorded base is gone",
    "push_to_hub": "<user>/<name>: upload the folder with huggingface_hub after exporting (needs a token)",
    "private": "true: create the hub repo private",
}

USAGE = """usage: agentforge export <run dir | checkpoint dir> [key=value ...]

Writes a self-contained Hugging Face model folder from a training run's checkpoint: the weights (a LoRA adapter
merged into its base with peft, or adapter_only=true), the tokenizer and chat template, generation_config.json with
the run's sampling, a model card (README.md) and agentforge_export.json. A run dir exports its newest complete
checkpoint; the line printed at the end names the one exported. Loads with plain transformers and vLLM.

options:
{options}

examples:
  agentforge export runs/train/<time>
  agentforge export runs/train/<time>/checkpoints/iter_000010 out=exported/sokoban dtype=bf16
  agentforge export runs/train/<time> adapter_only=true
  agentforge export runs/train/<time> push_to_hub=me/sokoban-agent     (needs HF_TOKEN or `hf auth login`)
  agentforge serve runs/train/<time>/export/iter_000010                (the OpenAI API on it; see serve --help)
"""


def usage() -> str:
    return USAGE.format(options="\n".join(f"  {k + '=':14} {v}" for k, v in OPTIONS.items()))


def export_command(args: list[str]) -> int:
    if not args or any(a in ("-h", "--help", "help") for a in args):
        print(usage())
        return 0
    from agentforge.export.hub import check_token, push_folder
    from agentforge.export.source import locate
    from agentforge.export.writer import check_out, default_out, export_model

    path, options = parse_args(args, OPTIONS, "export")
    dtype = dtype_name(options.get("dtype"), "") or None
    adapter_only = flag(options, "adapter_only")
    repo = options.get("push_to_hub")
    token = check_token(repo) if repo else None  # before minutes of work
    info = locate(path, base=options.get("base"))
    out = Path(options["out"]).expanduser() if options.get("out") else default_out(info)
    check_out(out)
    print(f"agentforge: exporting {info.source.describe()}", file=sys.stderr, flush=True)
    result = export_model(info, out, dtype=dtype, adapter_only=adapter_only)
    print(f"exported {result.what}")
    if repo and token:
        url = push_folder(result.out, repo, token, private=flag(options, "private"))
        print(f"pushed {result.out} to {url}")
    return 0
