"""`agentforge config [group [option]]`: every key with its type, default and one line of help, from the schema; and
the configuration reference (docs/configuration.md) and README tables generated from the same source."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import agentforge.launch.options  # noqa: F401  (registers the `launch` section's schema)
import agentforge.learner.config  # noqa: F401  (registers the `learner` section's schema)
from agentforge.schema.options import default_text, options
from agentforge.schema.registry import (
    ENGINE_SCHEMAS,
    SECTIONS,
    algorithm_schema,
    env_schema,
    group_options,
    launch_schema,
    learner_schema,
)

GROUP_HELP = {
    "model": "the policy model (smollm2-135m, tiny, hf)",
    "engine": "the rollout engine (vllm, hf)",
    "env": "the environment (each env's own options)",
    "agent": "how episodes are played: turns, history, sampling",
    "algorithm": "advantages and rollout workflow (each algorithm's own options; docs/tjpo.md, docs/strata.md, "
                 "docs/t2po.md, docs/trajevolve.md, docs/gigpo.md)",
    "learner": "the DeepSpeed learner and the policy objective (docs/objectives.md)",
    "logger": "console, metrics.jsonl, wandb, TensorBoard",
    "trainer": "the training loop: iterations, batch, eval, checkpoints, warm start, dynamic sampling, curriculum",
    "eval": "`agentforge eval`: the evaluation protocol",
    "held_out": "the held-out splits: eval and test tasks distinct by content and never yielded by a training stream",
    "reward": "the reward stages: the invalid-action penalty, KL in the reward (agentforge/rewards/)",
    "sft": "the expert-SFT warm start and `agentforge sft`",
    "rft": "the RFT warm start and `agentforge rft`",
    "rollout": "`agentforge rollout`: play only",
    "launch": "`agentforge launch slurm key=value ...` (not Hydra keys: the launcher's own)",
    "env_pool": "the Ray env workers",
    "top": "keys outside the groups",
}
OBJECTIVE_KEYS = ("learner.loss.", "learner.old_logprobs", "learner.rollout_correction.", "learner.ppo_epochs",
                  "learner.mini_batch_size", "learner.mini_batch_unit", "learner.shuffle", "learner.temperature",
                  "trainer.dynamic_sampling.")


@dataclass(frozen=True)
class Row:
    key: str
    type: str
    default: str
    help: str


def rows(schema: Any, prefix: str) -> list[Row]:
    """Every key of a schema, nested sections flattened (learner.loss.eps_low ...)."""
    out: list[Row] = []
    for name, option in options(schema).items():
        key = f"{prefix}.{name}" if prefix else name
        if option.nested is not None:
            out += rows(option.nested, key)
            continue
        choices = f" ({' | '.join('null' if c is None else str(c) for c in option.choices)})" if option.choices else ""
        out.append(Row(key, option.type_name, default_text(option.default), f"{option.help}{choices}".strip()))
    return out


def group_rows(group: str, option: str | None = None, builtin_only: bool = False) -> list[Row]:
    from agentforge.schema.groups import TopLevelSchema

    if group == "top":
        return rows(TopLevelSchema, "")
    if group in SECTIONS:
        return rows(SECTIONS[group], group)
    if group == "learner":
        return rows(learner_schema(), "learner")
    if group == "launch":
        return rows(launch_schema(), "")
    resolve = {"engine": lambda n: ENGINE_SCHEMAS[n], "env": env_schema, "algorithm": algorithm_schema}.get(group)
    if resolve is None:
        raise KeyError(group)
    names = [option] if option else group_options(group, builtin_only)
    out: list[Row] = []
    for name in names:
        out += [Row(r.key.replace(f"{group}.", f"{group}[{name}].", 1), r.type, r.default, r.help)
                for r in rows(resolve(name), group)]
    return out


def markdown(table: list[Row]) -> str:
    lines = ["| key | type | default | help |", "| --- | --- | --- | --- |"]
    for r in table:
        cells = [f"`{r.key}`", r.type.replace("|", "\\|"), f"`{r.default}`".replace("|", "\\|"),
                 r.help.replace("|", "\\|")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def objective_rows() -> list[Row]:
    every = group_rows("learner") + group_rows("trainer")
    return [r for r in every if r.key.startswith(OBJECTIVE_KEYS) and not r.key.startswith("learner.lora")]


def reference_markdown() -> str:
    """docs/configuration.md: every group's keys."""
    parts = ["# Configuration reference",
             "",
             "Generated from the schema (`agentforge/schema/`, the learner's `LearnerConfig`, each algorithm's config "
             "class, each env's constructor) by `agentforge config --sync-docs`; `tests/unit/test_schema.py` fails "
             "when this file and the schema drift. Every key is checked when a command starts: unknown keys (with the "
             "nearest valid one), types, bounds and choices, all problems at once, exit status 2.",
             "", *SECTION_ROUTES, ""]
    for group in ("top", "model", "engine", "env", "agent", "algorithm", "learner", "trainer", "sft", "rft", "eval",
                  "held_out", "rollout", "env_pool", "logger", "launch"):
        parts += [f"## {group}", "", GROUP_HELP[group] + ".", "", markdown(group_rows(group, builtin_only=True)), ""]
    return "\n".join(parts)


SECTION_ROUTES = (
    "## Where each section goes",
    "",
    "A command reads the composed config once, in its own layer (`agentforge train`: "
    "`agentforge/commands/train.py`, `build_trainer`; `agentforge eval`: `agentforge/commands/evaluate.py`, "
    "`build_evaluator`; both with the builders of `agentforge/commands/builders.py`), checks it, and hands each "
    "part of the "
    "run only its own section, typed: the training loop, the evaluator, the engine, the env pool, the learner and "
    "the warm starts never see the composed config. From Python: "
    "`build_trainer(compose_config([\"command=train\", \"recipe=...\"], run_dir=\"runs/mine\")).fit()`.",
    "",
    "| section | handed to | as |",
    "| --- | --- | --- |",
    "| `model` | `models/loading.py` (`resolve_model`) | a `ModelSpec` (path, dtype, name) |",
    "| `engine` | `engines/` (`make_engine`; `engines/replicas/` for `engine.replicas`) | the engine's own options, "
    "`kv_cache_space_gb: auto` and `logprobs_mode: auto` resolved from the run |",
    "| `env`, `env_pool` | `hosting/pool.py` (`make_pool`), `tasks/` (the task samplers, the held-out sets), "
    "`agent/prompts.py` (the "
    "template) | the env's name and options; the pool's keywords |",
    "| `agent` | `rollout/workflow.py` (`RolloutContext`) | an `AgentConfig` with its `SamplingConfig` |",
    "| `algorithm` | `algorithms/` (`make_algorithm`) | the algorithm's config class |",
    "| `learner` | `learner/` (`Learner`) | a `LearnerConfig` (the sampling temperature, Dr. GRPO's L and the LR "
    "schedule's length filled in: `commands/train_checks.py`) |",
    "| `trainer` | `training/trainer.py` (`Trainer`) | `TrainerSettings`: the section as `TrainerSchema`, the run's "
    "seed and title, the staleness bound; its `dynamic_sampling` and `curriculum` become parts (`DynamicSampling`, "
    "the curriculum sampler) |",
    "| `sft`, `rft` | `training/warm_start.py` (`WarmStart`, for `trainer.warm_start`) | `SFTSchema`, `RFTSchema` "
    "and an `ExpertPlay` (env, agent) |",
    "| `logger` | `tracking/tracker.py` (`RunTracker`) | a mapping (and the whole resolved config, written to "
    "`config.yaml` and wandb as the run's record) |",
    "| `eval` | `evaluation/evaluator.py` (`Evaluator`, built by `build_evaluator`) | `EvalSettings`, with the model "
    "spec, the held-out tasks, the engine, the pool and the eval workflow built from the sections above |",
    "| `rollout` | `commands/rollout.py` (`agentforge rollout`: the command is its own layer) | its values |",
    "| `held_out` | `builders.py` (`build_held_out`, `build_training_streams`) for train, sft, rft and eval | the "
    "reserve: `envs/task_keys.py` keys the tasks, `held_out.py` builds the test and eval sets and the filter every "
    "training stream draws through |",
    "| `reward` | `rewards/` (`RewardPipeline`, built by `builders.build_rewards` into the `RolloutContext` of every "
    "command) | a `RewardSchema`; `reward.kl.coef > 0` also sets the learner's `keep_reference` |",
)

GROUP_CHOICES = {"model": "smollm2-135m (default), tiny, hf (model.path=...)", "engine": "vllm (default), hf",
                 "env": "sokoban, webshop, search_qa, code, scienceworld, alfworld, alfworld_intervention, agent, mix, "
                        "gym, gem, textarena, reasoning_gym",
                 "algorithm": "grpo, gigpo, tjpo, strata, t2po, trajevolve, ppo (with a critic), dr_grpo (GRPO "
                              "preset)",
                 "agent": "default", "learner": "deepspeed", "logger": "console"}
README_BLOCKS = ("config-groups", "objective")
DOCS_PATH = "docs/configuration.md"


def groups_table() -> str:
    """The README's overview: each group, its options, what it holds and how many keys."""
    lines = ["| group | options | what | keys |", "| --- | --- | --- | --- |"]
    for group, text in GROUP_HELP.items():
        if group == "top":
            continue
        choices = group_options(group, builtin_only=True)
        counts = sorted({len(group_rows(group, option)) for option in choices}) if choices else \
            [len(group_rows(group))]
        count = str(counts[0]) if len(counts) == 1 else f"{counts[0]}-{counts[-1]} per option"
        keys = f"{count} (`agentforge config {group}`)"
        lines.append(f"| `{group}` | {GROUP_CHOICES.get(group, '—')} | {text} | {keys} |")
    return "\n".join(lines)


def readme_block(name: str) -> str:
    return groups_table() if name == "config-groups" else markdown(objective_rows())


def replace_block(text: str, name: str, content: str) -> str:
    """Put `content` between the README's `<!-- generated: name -->` and `<!-- end generated: name -->` lines."""
    start, end = f"<!-- generated: {name} -->", f"<!-- end generated: {name} -->"
    if start not in text or end not in text:
        raise ValueError(f"the README has no {start} ... {end} block")
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{start}\n{content}\n{end}{tail}"


def sync_docs(root: str = ".", write: bool = True) -> list[str]:
    """Regenerate the README's tables and docs/configuration.md from the schema; returns the files that differed."""
    from pathlib import Path

    changed = []
    readme = Path(root) / "README.md"
    text = readme.read_text()
    new = text
    for name in README_BLOCKS:
        new = replace_block(new, name, readme_block(name))
    if new != text:
        changed.append(str(readme))
        if write:
            readme.write_text(new)
    reference = Path(root) / DOCS_PATH
    content = reference_markdown() + "\n"
    if not reference.is_file() or reference.read_text() != content:
        changed.append(str(reference))
        if write:
            reference.write_text(content)
    return changed


def config_command(args: list[str]) -> int:
    """`agentforge config [group [option]] [--markdown]`; `--sync-docs` rewrites the README's tables and
    docs/configuration.md from the schema (run from the repository)."""
    if "--sync-docs" in args:
        changed = sync_docs()
        print("updated: " + (", ".join(changed) if changed else "nothing (already in sync)"))
        return 0
    as_markdown = "--markdown" in args
    args = [a for a in args if a != "--markdown"]
    if not args:
        if as_markdown:
            print(reference_markdown())
            return 0
        print("config groups (agentforge config <group> [option] lists their keys):")
        for group, text in GROUP_HELP.items():
            print(f"  {group:<10} {text}")
        return 0
    group, option = args[0], (args[1] if len(args) > 1 else None)
    try:
        table = group_rows(group, option)
    except KeyError:
        valid = ", ".join(GROUP_HELP)
        print(f"agentforge config: unknown group {group!r}; groups: {valid}", file=sys.stderr)
        return 2
    except Exception as error:  # an unknown option of a group (env, algorithm, engine)
        print(f"agentforge config: {group} {option!r}: {error}; options: {', '.join(group_options(group))}",
              file=sys.stderr)
        return 2
    if as_markdown:
        print(markdown(table))
        return 0
    from rich.console import Console
    from rich.table import Table

    out = Table(title=f"{group}{f' ({option})' if option else ''}: {GROUP_HELP.get(group, '')}")
    for column in ("key", "type", "default", "help"):
        out.add_column(column, overflow="fold")
    for r in table:
        out.add_row(r.key, r.type, r.default, r.help)
    Console().print(out)
    return 0
