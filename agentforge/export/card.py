"""The model card (README.md with Hugging Face front matter) of an exported folder: what was trained from what, how,
for how long, what the evals measured (95 % intervals; the paired verdicts when the run has them), and the command
that reproduces the run. Every number comes from the run's own files; what a run does not have is left out."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import yaml

from agentforge.export.source import RunInfo

# the settings a reader needs to know what was trained: (config section, key)
KEY_SETTINGS = (
    ("algorithm", "name"), ("algorithm", "lambda"), ("algorithm", "alpha"), ("algorithm", "variant"),
    ("learner", "lr"), ("learner", "dtype"), ("learner", "kl_coef"), ("learner", "ppo_epochs"),
    ("trainer", "iterations"), ("trainer", "tasks_per_iteration"), ("trainer", "group_size"),
    ("trainer", "warm_start"), ("agent", "max_turns"), ("env", "name"),
)


# agentforge's model names → the hub model they are converted from
HUB_MODELS = {"smollm2-135m": "HuggingFaceTB/SmolLM2-135M-Instruct"}


def hub_base_model(cfg: dict[str, Any]) -> str | None:
    model = cfg.get("model") or {}
    path = str(model.get("path") or "")
    if model.get("name") == "hf" and path and not Path(path).exists():
        return path  # model=hf model.path=<hub id>
    return HUB_MODELS.get(str(model.get("name")))


def episodes_trained(metrics: list[dict[str, Any]], iteration: int | None) -> int | None:
    """Training episodes up to the checkpoint's iteration (a resumed run's repeated rows count once)."""
    by_iteration: dict[int, float] = {}
    for row in metrics:
        if "train/episodes" in row and (iteration is None or int(row.get("iteration", 0)) <= iteration):
            by_iteration[int(row.get("iteration", 0))] = float(row["train/episodes"])
    return int(sum(by_iteration.values())) if by_iteration else None


def reproduce_command(run_dir: Path | None) -> str | None:
    """`agentforge train <the run's overrides>` from Hydra's record of the command line."""
    if run_dir is None or not (run_dir / ".hydra" / "overrides.yaml").is_file():
        return None
    overrides = yaml.safe_load((run_dir / ".hydra" / "overrides.yaml").read_text()) or []
    command = next((o.split("=", 1)[1] for o in overrides if o.startswith("command=")), "train")
    rest = [o for o in overrides if not o.startswith("command=")]
    return " ".join(["agentforge", command, *(shlex.quote(o) for o in rest)])


def recipe_of(run_dir: Path | None) -> str | None:
    if run_dir is None or not (run_dir / ".hydra" / "overrides.yaml").is_file():
        return None
    overrides = yaml.safe_load((run_dir / ".hydra" / "overrides.yaml").read_text()) or []
    return next((o.split("=", 1)[1] for o in overrides if o.startswith("recipe=")), None)


def _setting(cfg: dict[str, Any], section: str, key: str) -> Any:
    return (cfg.get(section) or {}).get(key)


def _rate(value: Any, interval: Any) -> str:
    """`12.5% [6.5%, 22.8%]`, or – for a row without the rate (the random floor writes no text)."""
    if value is None:
        return "–"
    if not interval:
        return f"{value:.1%}"
    return f"{value:.1%} [{interval[0]:.1%}, {interval[1]:.1%}]"


def eval_table(summary: dict[str, Any]) -> list[str]:
    rows = summary.get("evals") or []
    if not rows:
        return []
    lines = ["| eval | episodes | success [95 %] | valid format [95 %] | mean return |",
             "| --- | ---: | ---: | ---: | ---: |"]
    for row in rows:
        mean_return = row.get("mean_return")
        lines.append(f"| {row.get('name')} | {row.get('episodes')} | "
                     f"{_rate(row.get('success'), row.get('success_interval'))} | "
                     f"{_rate(row.get('valid_format'), row.get('valid_format_interval'))} | "
                     f"{'–' if mean_return is None else f'{mean_return:+.2f}'} |")
    return lines


def verdict_lines(summary: dict[str, Any]) -> list[str]:
    """The paired verdicts (`verdicts`, where the run wrote them) first, then the run's other verdict lines (the
    interval-overlap ones) that do not repeat them."""
    paired = [_verdict_text(v) for v in summary.get("verdicts") or []] if isinstance(
        summary.get("verdicts"), list) else []
    others = [str(v) for v in summary.get("verdict") or [] if str(v) not in paired]
    return [f"- {line}" for line in [*paired, *others]]


def _verdict_text(verdict: Any) -> str:
    if isinstance(verdict, dict):
        text = verdict.get("text") or verdict.get("verdict") or verdict.get("line")
        return str(text) if text else ", ".join(f"{k}: {v}" for k, v in verdict.items())
    return str(verdict)


def model_card(info: RunInfo, meta: dict[str, Any]) -> str:
    cfg = info.config
    recipe = recipe_of(info.run_dir) or meta.get("recipe")
    env = f" on {meta['env']}" if meta.get("env") else ""
    algorithm = meta.get("algorithm") or "unknown"
    front = {"library_name": "peft" if meta["adapter_only"] else "transformers",
             "pipeline_tag": "text-generation",
             "tags": [t for t in ("agentforge", "reinforcement-learning", "agent", algorithm, meta.get("env")) if t]}
    hub_base = hub_base_model(cfg)
    if hub_base:  # the hub id it started from (a local cache folder is no front-matter base_model)
        front["base_model"] = hub_base
    lines = ["---", yaml.safe_dump(front, sort_keys=False).strip(), "---", "",
             f"# {meta.get('model_name') or 'policy'} trained with agentforge ({algorithm}{env})", ""]
    lines += ["| | |", "| --- | --- |",
              f"| base model | {meta.get('base_model') or cfg.get('model', {}).get('name')} |",
              f"| exported | {meta['how']}, {meta['dtype']} |",
              f"| checkpoint | {(meta.get('source') or {}).get('path') or info.source.path} |"]
    if recipe:
        lines.append(f"| recipe | `{recipe}` |")
    iterations = info.iteration
    if iterations is not None:
        total = (cfg.get("trainer") or {}).get("iterations")
        lines.append(f"| iterations trained | {iterations}{f' of {total}' if total else ''} |")
    episodes = episodes_trained(info.metrics, iterations)
    if episodes is not None:
        lines.append(f"| episodes trained | {episodes} |")
    lines.append(f"| agentforge | {meta['agentforge_version']} |")
    settings = [(f"{s}.{k}", _setting(cfg, s, k)) for s, k in KEY_SETTINGS]
    lora = (cfg.get("learner") or {}).get("lora") or {}
    if lora.get("enabled"):
        settings.append(("learner.lora", f"rank {lora.get('rank')}, alpha {lora.get('alpha')}, "
                                         f"{', '.join(lora.get('target_modules') or [])}"))
    settings = [(k, v) for k, v in settings if v is not None]
    if settings:
        lines += ["", "## Training settings", "", "| setting | value |", "| --- | --- |"]
        lines += [f"| `{k}` | {v} |" for k, v in settings]
    sampling = meta.get("sampling") or {}
    if sampling:
        lines += ["", "## Sampling", "",
                  "What the run sampled with (also in generation_config.json): "
                  + ", ".join(f"{k} {v}" for k, v in sampling.items()) + "."]
    table = eval_table(info.summary)
    if table:
        lines += ["", "## Evaluation", "", "Held-out evals of the run (the first row is the model before training "
                  "where the run measured it). [a, b]: 95 % Wilson interval over the eval's episodes (success) or "
                  "turns (valid format).", "", *table]
        verdicts = verdict_lines(info.summary)
        if verdicts:
            lines += ["", *verdicts]
    command = reproduce_command(info.run_dir)
    if command:
        lines += ["", "## Reproduce", "", "```bash", command, "```"]
    lines += ["", "## Use", "", "```python", "from transformers import AutoModelForCausalLM, AutoTokenizer",
              *(["from peft import PeftModel"] if meta["adapter_only"] else []), ""]
    if meta["adapter_only"]:
        lines += [f"base = AutoModelForCausalLM.from_pretrained({str(meta['base_model'])!r})",
                  "model = PeftModel.from_pretrained(base, \"<this folder>\")"]
    else:
        lines += ["model = AutoModelForCausalLM.from_pretrained(\"<this folder>\")"]
    lines += ["tokenizer = AutoTokenizer.from_pretrained(\"<this folder>\")", "```", "",
              "Or serve it behind the OpenAI API (chat completions with tools): `agentforge serve <this folder>`.", ""]
    return "\n".join(lines)
