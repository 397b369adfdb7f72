"""Checks that fail a training config before any expensive start-up, and `resume=` resolution."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from agentforge.algorithms import make_algorithm
from agentforge.errors import AgentforgeError, ConfigError, ConfigProblems
from agentforge.learner.config import LearnerConfig


def check_group_size(cfg: DictConfig) -> None:
    t = cfg.trainer
    if algorithm_class_says(cfg, "group_relative") and int(t.group_size) < 2:
        raise ConfigError(
            f"{cfg.algorithm.name} compares rollouts within a group: trainer.group_size={t.group_size} gives every "
            "advantage 0 and nothing is learned; use trainer.group_size >= 2"
        )


def check_ranks_divide_the_batch(cfg: DictConfig) -> None:
    t = cfg.trainer
    episodes = int(t.tasks_per_iteration) * int(t.group_size)
    ranks = int(cfg.learner.num_ranks)
    if episodes % ranks:
        raise ConfigError(
            f"the batch of {episodes} episodes (trainer.tasks_per_iteration x trainer.group_size) is not divisible "
            f"by learner.num_ranks={ranks}: every rank must get whole episodes; change one of them"
        )


def check_token_budget(cfg: DictConfig) -> None:
    budget = int(cfg.agent.max_prompt_tokens) + int(cfg.agent.sampling.max_new_tokens)
    max_len = cfg.engine.get("max_model_len")
    if max_len is not None and budget > int(max_len):
        raise ConfigError(
            f"agent.max_prompt_tokens + agent.sampling.max_new_tokens = {budget} exceeds engine.max_model_len="
            f"{max_len}; lower one or raise engine.max_model_len"
        )


def check_summaries(cfg: DictConfig) -> None:
    """`agent.history=summary` trains each summary with the advantage of the turn after it: a per-turn advantage. An
    algorithm that gives per-token advantages (a critic's GAE, a teacher's log-probs) has none for it."""
    agent = cfg.agent
    if agent.get("history") == "summary" and agent.get("schedule") == "per_episode":
        raise ConfigError("agent.history=summary generates its summaries between lockstep turns; "
                          "agent.schedule=per_episode is not built for it: set agent.schedule=lockstep")
    if agent.get("history") != "summary" or not bool(agent.get("summary", {}).get("train", True)):
        return
    for flag, what in (("needs_values", "a critic's per-token GAE"), ("needs_teacher", "a teacher's log-probs")):
        if algorithm_class_says(cfg, flag):
            raise ConfigError(f"agent.history=summary trains summaries with their next turn's advantage, but "
                              f"algorithm {cfg.algorithm.name!r} gives per-token advantages ({what}); set "
                              "agent.summary.train=false (summaries masked) or use a per-turn algorithm")


def check_algorithm_run(cfg: DictConfig) -> None:
    make_algorithm(cfg.algorithm).check_run(
        {key: OmegaConf.to_container(cfg[key], resolve=True)
         for key in ("trainer", "agent", "engine", "model", "env", "learner")})


def check_run_learner(cfg: DictConfig) -> None:
    """The learner as this run configures it (temperature, Dr. GRPO's L) and the mini-batch against the batch."""
    learner = learner_config_for_run(cfg)
    problems = learner._value_problems()
    if problems:
        raise ConfigProblems(problems)
    check_mini_batch(cfg, learner)
    if learner.critic.enabled and learner.critic.path and not (Path(learner.critic.path) / "config.json").exists():
        raise ConfigError(f"learner.critic.path={learner.critic.path} is not an HF model folder (no config.json); "
                          "point it at the separate critic's folder, or null for the policy's own body")
    if learner.needs_reference() and learner.lora.enabled and learner.zero_stage == 3 and warm_starts(cfg):
        raise ConfigError("learner.loss.kl_coef > 0 with LoRA under ZeRO-3 keeps the base model (adapters off) as the "
                          "KL reference, which cannot follow trainer.warm_start: use learner.zero_stage <= 2, or "
                          "warm-start first (`agentforge sft`) and train from its folder with model.init_from")


def check_warm_start(cfg: DictConfig) -> None:
    modes = warm_start_modes(cfg.trainer.get("warm_start"))
    if "rft" in modes and (cfg.get("rft") or {}).get("student"):
        raise ConfigError("rft.student trains another model on the rollouts, which `agentforge rft` does; a training "
                          "run's warm start trains the run's own model: drop rft.student, or run `agentforge rft "
                          "rft.student=...` first and train from its output with model.init_from")
    expert_sft = "expert" in modes or cfg.get("command") == "sft"
    if expert_sft and cfg.env.name == "agent" and not cfg.env.get("expert"):
        raise ConfigError("an external agent's expert warm start (trainer.warm_start=expert, agentforge sft) plays "
                          "the agent with an expert answering its model calls: set env.expert=package.module:callable "
                          "(e.g. agentforge.gateway.examples.search_tools:expert), or trainer.warm_start=false")
    if expert_sft and cfg.env.name not in ("agent", "mix"):
        from agentforge.envs.base import expert_for

        expert_for(str(cfg.env.name))  # the env has its own expert, or the error names the ones that do


WARM_STARTS = ("expert", "rft")


def warm_start_modes(setting: Any) -> list[str]:
    """`trainer.warm_start` as a list of modes: false → []; true → [expert]; a name or a list of names."""
    if setting in (False, None, "false", "none"):
        return []
    if setting is True or setting == "true":
        return ["expert"]
    names = [str(setting)] if isinstance(setting, str) else [str(name) for name in setting]
    unknown = [name for name in names if name not in WARM_STARTS]
    if unknown:
        raise ConfigError(f"trainer.warm_start: unknown mode(s) {unknown}; use true/false, expert, rft or a "
                              "list such as [expert, rft]")
    return names




def warm_starts(cfg: DictConfig) -> bool:
    return cfg.trainer.get("warm_start") not in (False, None, "false", "none", [])


def check_sampling_for_training(cfg: DictConfig) -> None:
    """Training samples must come from the distribution the learner computes log-probs of: softmax(logits / T)
    over the whole vocabulary. Top-p/top-k truncate it and penalties reshape it per context, so the sampled policy
    would differ from the trained one (ratios off 1, a biased gradient): refused, with the reason. (They remain
    fine for `agentforge eval`, e.g. its pp/rp baselines.)"""
    sampling = cfg.agent.sampling
    off = []
    if float(sampling.top_p) < 1.0:
        off.append(f"agent.sampling.top_p={sampling.top_p} (use 1.0)")
    if int(sampling.top_k) > 0:
        off.append(f"agent.sampling.top_k={sampling.top_k} (use 0)")
    if float(sampling.presence_penalty) != 0.0:
        off.append(f"agent.sampling.presence_penalty={sampling.presence_penalty} (use 0)")
    if float(sampling.repetition_penalty) != 1.0:
        off.append(f"agent.sampling.repetition_penalty={sampling.repetition_penalty} (use 1.0)")
    if off:
        raise ConfigError(
            "training samples must come from the policy the learner trains, softmax(logits / temperature) over the "
            "whole vocabulary; truncated or penalised sampling trains a different policy than the one that sampled "
            "(PPO ratios off 1, biased gradients). Set " + ", ".join(off) + "; the temperature alone is handled "
            "(the learner divides logits by it). Penalties and top-p/top-k remain available to `agentforge eval`.")
    if not float(sampling.temperature) > 1e-5:
        raise ConfigError(f"agent.sampling.temperature={sampling.temperature}: training needs sampling (> 0); greedy "
                          "decoding gives the policy gradient nothing to compare")


def learner_config_for_run(cfg: DictConfig, total_steps: int | None = None) -> LearnerConfig:
    """The learner group as the run needs it: the sampling temperature, Dr. GRPO's L (the response budget) unless
    given, and the LR schedule's length in optimizer steps."""
    values = dict(OmegaConf.to_container(cfg.learner, resolve=True))
    if values.get("temperature") is None:
        values["temperature"] = float(cfg.agent.sampling.temperature)
    loss = dict(values.get("loss") or {})
    if loss.get("loss_scale_factor") is None:
        loss["loss_scale_factor"] = float(cfg.agent.sampling.max_new_tokens)
    values["loss"] = loss
    if total_steps is not None:
        values["total_steps"] = total_steps
    reward_kl = cfg.get("reward", {}).get("kl", {}) or {}
    if float(reward_kl.get("coef", 0.0) or 0.0) > 0:  # KL in the reward (a reward stage) needs the reference
        values["keep_reference"] = True
    if algorithm_needs_values(cfg):  # the algorithm reads a critic: the learner trains one
        values["critic"] = {**dict(values.get("critic") or {}), "enabled": True}
    return LearnerConfig.from_mapping(values)


def algorithm_needs_values(cfg: DictConfig) -> bool:
    """Whether the run's algorithm asks for a critic (`Algorithm.needs_values`)."""
    return algorithm_class_says(cfg, "needs_values")


def algorithm_class_says(cfg: DictConfig, flag: str) -> bool:
    """A class-level flag of the run's algorithm (`Algorithm.group_relative`, `needs_values`): what it needs, said by
    the algorithm itself rather than listed by name here."""
    import agentforge.algorithms  # noqa: F401  (registers the built-ins)
    from agentforge.algorithms.base import ALGORITHMS

    try:
        return bool(getattr(ALGORITHMS.get(str(cfg.algorithm.name)), flag, False))
    except (AgentforgeError, ImportError, AttributeError):  # an unknown algorithm: the algorithm's check says so
        return False


def batch_bounds(cfg: DictConfig) -> tuple[int, int]:
    """Upper bounds on one iteration's turn samples and loss tokens (every episode at its longest, plus one span
    per episode for workflows that add a strategy)."""
    t = cfg.trainer
    turns = int(t.tasks_per_iteration) * int(t.group_size) * (int(cfg.agent.max_turns) + 1)
    return turns, turns * int(cfg.agent.sampling.max_new_tokens)


def check_mini_batch(cfg: DictConfig, learner: LearnerConfig) -> None:
    if learner.mini_batch_size is None:
        return
    turns, tokens = batch_bounds(cfg)
    bound = turns if learner.mini_batch_unit == "turns" else tokens
    if learner.mini_batch_size >= bound:
        raise ConfigError(
            f"learner.mini_batch_size={learner.mini_batch_size} {learner.mini_batch_unit} is not smaller than the "
            f"largest possible batch ({bound} {learner.mini_batch_unit}: trainer.tasks_per_iteration x "
            "trainer.group_size episodes of agent.max_turns turns), so it is always one mini-batch; lower it, or set "
            "learner.mini_batch_size=null for one optimizer step per epoch")


def optimizer_steps_per_iteration(cfg: DictConfig, learner: LearnerConfig) -> int:
    """An upper bound on one iteration's optimizer steps (the LR schedule must not reach its end before the run
    does: a decayed schedule ends above 0 when batches are smaller than the bound)."""
    if learner.mini_batch_size is None:
        return learner.ppo_epochs
    turns, tokens = batch_bounds(cfg)
    bound = turns if learner.mini_batch_unit == "turns" else tokens
    return learner.ppo_epochs * -(-bound // learner.mini_batch_size)


def check_dynamic_sampling(cfg: DictConfig) -> None:
    """The retry budget (the schema has its type; here the message says why it must be there)."""
    from agentforge.objective.dynamic_sampling import METRICS

    section = cfg.trainer.get("dynamic_sampling")
    if section is None or not section.get("enabled", False):
        return
    rounds = section.get("max_rounds")
    if rounds is None or not isinstance(rounds, int) or isinstance(rounds, bool) or rounds < 2:
        raise ConfigError(
            f"trainer.dynamic_sampling.max_rounds={rounds}: dynamic sampling replaces groups without signal by "
            "playing more batches and needs a retry budget of at least 2 rounds (the first batch plus one more); "
            "set e.g. trainer.dynamic_sampling.max_rounds=4")
    if section.get("metric", "return") not in METRICS:
        raise ConfigError(f"trainer.dynamic_sampling.metric={section.get('metric')!r} is unknown; use one of "
                          f"{', '.join(METRICS)}")


def max_staleness(cfg: DictConfig) -> int:
    section = cfg.trainer.get("asynchronous")
    return int(section.get("max_staleness", 0) or 0) if section is not None else 0


def check_asynchronous(cfg: DictConfig) -> None:
    """Asynchronous training needs engines that run beside the learner, an algorithm whose unit is the group, and
    nothing that uses the engine between rollout and update."""

    k = max_staleness(cfg)
    if k == 0:
        return
    problems = []
    where = f"trainer.asynchronous.max_staleness={k}"
    if cfg.engine.get("replicas") is None:
        problems.append(f"{where} plays rollouts while the learner trains, which the in-process engine cannot (it "
                        "runs in the trainer's own thread of work): set engine.replicas=1 or more")
    if cfg.engine.get("colocate") or cfg.engine.get("enable_sleep_mode"):
        problems.append(f"{where}: engines that sleep during the update (engine.colocate / engine.enable_sleep_mode) "
                        "cannot roll out beside it; set both to false")
    reason = getattr(type(make_algorithm(cfg.algorithm)), "not_asynchronous", None)
    if reason:
        problems.append(f"{where}: algorithm {cfg.algorithm.name!r} cannot train asynchronously: {reason}; use "
                        "max_staleness=0 (or grpo, gigpo, tjpo, t2po)")
    section = cfg.trainer.get("dynamic_sampling")
    if section is not None and section.get("enabled", False):
        problems.append(f"{where}: dynamic sampling plays extra rounds inside one iteration's rollout; it is not "
                        "built for asynchronous training: set trainer.dynamic_sampling.enabled=false")
    if problems:
        raise ConfigProblems(problems)


def resolve_resume_dir(cfg: DictConfig) -> Path | None:
    """`resume=false` → None; `resume=<run dir>` → it; `resume=true` → the newest run of this command that has a
    checkpoint (sibling folders of this run's folder); `resume=auto` → this run's own folder when it has a complete
    checkpoint, else a fresh start (what a requeued Slurm job with a fixed run dir needs)."""
    resume = cfg.get("resume", False)
    if resume in (False, None, "false", "False"):
        return None
    if resume == "auto":
        here = Path(cfg.run_dir)
        if not any((here / "checkpoints").glob("iter_*/COMPLETE")):
            return None
        problem = foreign_run(here)
        if problem:
            raise ConfigError(f"resume=auto: {problem}")
        return here
    if resume not in (True, "true", "True"):
        path = Path(str(resume))
        if not (path / "checkpoints").is_dir():
            raise ConfigError(f"resume={resume}: no checkpoints/ folder there; point it at a run directory")
        problem = foreign_run(path)
        if problem:
            raise ConfigError(f"resume={resume}: {problem}")
        return path
    here = Path(cfg.run_dir).resolve()
    candidates = [
        p for p in here.parent.glob("*")
        if p.is_dir() and p.resolve() != here and any((p / "checkpoints").glob("iter_*")) and not foreign_run(p)
    ]
    if not candidates:
        raise ConfigError(
            f"resume=true found no earlier run with checkpoints under {here.parent}; pass resume=<run dir> instead"
        )
    return max(candidates, key=lambda p: p.stat().st_mtime)


def foreign_run(path: Path) -> str | None:
    """Why `path` is not a run dir this user may resume (None when it is): resuming reads the checkpoint's DeepSpeed
    files, which DeepSpeed loads with `torch.load(weights_only=False)` (code can run), so only run dirs this user
    owns, with the config.yaml the run wrote, are resumed; `resume=true` passes over others."""
    uid = os.getuid()
    for part in (path, path / "checkpoints"):
        if part.exists() and part.stat().st_uid != uid:
            return (f"{part} belongs to another user (uid {part.stat().st_uid}); its checkpoint files are read "
                    "with DeepSpeed's pickle loader, which can run code. Copy the run into a folder of your own "
                    "after checking where it came from, and resume=<that folder>")
    if not (path / "config.yaml").is_file():
        return (f"{path} has no config.yaml: it was not written by `agentforge train`; resume=<a run dir that "
                "agentforge wrote>")
    return None


# The training loop's multi-key checks, each run on its own so that all their problems are reported at once.
TRAIN_CHECKS = [check_group_size, check_ranks_divide_the_batch, check_token_budget, check_sampling_for_training,
                check_summaries, check_algorithm_run, check_run_learner, check_dynamic_sampling, check_warm_start,
                check_asynchronous]
