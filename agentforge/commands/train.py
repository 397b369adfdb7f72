"""The train command's layer: read the composed config once, check it, build every part of the run, hand the
`Trainer` its settings and parts.

Why: the loop (`training/trainer.py`) then reads only its own section, and the config's way through the code is
here: each builder takes the section its part needs (the engine its engine options, the learner its
`LearnerConfig`, the pool its env options).
"""

from __future__ import annotations

import contextlib
import logging
import random
from dataclasses import replace
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig

from agentforge.commands.builders import (
    build_expert_play,
    build_held_out,
    build_model_spec,
    build_privileged_context,
    build_rollout_stack,
    build_task_depth,
    build_training_streams,
    plain,
    prepare_run_dir,
    without_name,
)
from agentforge.commands.preflight import preflight
from agentforge.commands.train_checks import (
    learner_config_for_run,
    max_staleness,
    optimizer_steps_per_iteration,
    resolve_resume_dir,
    warm_start_modes,
)
from agentforge.hosting.pool import ensure_ray
from agentforge.learner import Learner, LearnerConfig
from agentforge.learner.memory import check_memory_fit
from agentforge.objective.dynamic_sampling import DynamicSampling
from agentforge.reliability.checkpoint import CheckpointManager
from agentforge.reliability.closing import close_quietly
from agentforge.reliability.reaper import start_reaper
from agentforge.schema.groups import RFTSchema, SFTSchema, TrainerSchema
from agentforge.schema.options import typed
from agentforge.tasks import task_sampler
from agentforge.tasks.held_out import earlier_training
from agentforge.tracking.progress import console
from agentforge.tracking.tracker import RunTracker
from agentforge.training.curriculum import with_curriculum
from agentforge.training.parts import Floor, TrainerParts, TrainerSettings
from agentforge.training.rft import check_rft_config
from agentforge.training.trainer import Trainer
from agentforge.training.warm_start import WarmStart, step_budget

log = logging.getLogger("agentforge.commands.train")


def run_train(cfg: DictConfig) -> dict[str, Any]:
    """`agentforge train`: build the run, train it, return its before/after summary."""
    return build_trainer(cfg).fit()


def build_trainer(cfg: DictConfig, checked: bool = False) -> Trainer:
    """A `Trainer` for a composed `command=train` config (what `agentforge train` runs; the entry for API users):
    the cheap checks first (unless the caller ran them: `checked`, as the CLI does for every command), then the
    model, the engine, Ray and the env pool, the learner, the task samplers."""
    if not checked:
        preflight(cfg)  # config, env options and data files, before the model, the engine and Ray start
    resume_dir = resolve_resume_dir(cfg)
    run_dir = resume_dir if resume_dir is not None else prepare_run_dir(cfg)
    spec = build_model_spec(cfg)
    modes = warm_start_modes(cfg.trainer.warm_start)
    sft, rft = typed(SFTSchema, plain(cfg.sft)), typed(RFTSchema, plain(cfg.rft))
    if "rft" in modes:
        check_rft_config(rft)
    learner_cfg = learner_config_for_run(cfg)  # the learner section read once, then its schedule's length set
    learner_cfg = replace(learner_cfg, total_steps=schedule_steps(cfg, learner_cfg, step_budget(modes, sft, rft)))
    learner_cfg.validate_for_model(spec.path)
    dynamic_sampling = DynamicSampling.from_config(cfg.trainer.get("dynamic_sampling"))
    check_memory_fit(spec.path, learner_cfg)
    warn_about_the_objective(learner_cfg)
    settings = trainer_settings(cfg, f"{cfg.algorithm.name} · {cfg.env.name} · {spec.name}")
    tcfg = settings.trainer
    console.print(f"[bold]train[/] {cfg.algorithm.name} on {cfg.env.name} · model {spec.name} · engine "
                  f"{cfg.engine.name} · run dir {run_dir}")
    with contextlib.ExitStack() as started:  # a start that fails part-way closes what it had started
        held_out, keyer = build_held_out(cfg, {"eval": tcfg.eval_tasks, "test": tcfg.test_tasks})
        started.callback(close_quietly, keyer.close)
        streams = build_training_streams(cfg, held_out, keyer)
        def after_engine(engine: Any) -> None:  # vLLM's in-process start-up reseeds torch: seed after it
            seed_everything(int(cfg.seed))
            ray_pool = cfg.env_pool.kind == "ray" and cfg.env.name != "agent"  # env=agent hosts no env workers
            if ray_pool or not learner_cfg.in_process or cfg.engine.get("replicas") is not None:
                ensure_ray()
                start_reaper()  # a SIGKILLed run leaves no Ray agents behind (agentforge/reliability/reaper.py)

        # the train workflow refuses an algorithm env=agent cannot train; gateways (env=agent) hold a server
        purposes = ["train", "eval", *(["rollout"] if "rft" in modes else [])]  # RFT's warm start plays "rollout"
        stack = build_rollout_stack(cfg, spec, purposes, after_engine)
        started.callback(close_quietly, stack.close)
        engine, ctx, algorithm = stack.engine, stack.ctx, stack.algorithm
        eval_ctx = ctx.with_sampling(replace(ctx.config.sampling, temperature=float(tcfg.eval_temperature)))
        env_name, env_options = str(cfg.env.name), without_name(cfg.env)
        eval_descriptors = eval_descriptor_names(env_name, algorithm)
        learner = Learner(spec.path, learner_cfg)  # after the refusals; parts draw from the seeded RNGs in this order
        started.callback(close_quietly, learner.close)
        if hasattr(engine, "weight_source"):  # engine replicas: a restarted one takes the current weights
            engine.weight_source = lambda: learner.export_weights(only_changed=True, copy=False)
        sampler = with_curriculum(task_sampler(env_name, env_options, "train", tcfg.seed_offset, streams.stream,
                                               streams.admit),
                                  plain(cfg.trainer.get("curriculum")), env_name,
                                  tcfg.iterations * tcfg.tasks_per_iteration)
        checkpoints = CheckpointManager(run_dir / "checkpoints", tcfg.keep_checkpoints)
        tracker = RunTracker(run_dir, plain(cfg.logger), plain(cfg), resume_dir is not None)
        started.callback(close_quietly, tracker.close)
        if settings.max_staleness and learner_cfg.old_logprobs == "engine":
            console.print("[yellow]asynchronous training with learner.old_logprobs=engine clips around the stale "
                          "behaviour policy; decoupled PPO clips around the learner's own policy: set "
                          "learner.old_logprobs=recompute learner.rollout_correction.is_level=token")
        parts = TrainerParts(
            run_dir=run_dir, resuming=resume_dir is not None, stack=stack, eval_ctx=eval_ctx, algorithm=algorithm,
            eval_descriptors=eval_descriptors, learner=learner, sampler=sampler,
            eval_tasks=held_out.tasks("eval", tcfg.eval_tasks),
            test_tasks=held_out.tasks("test", tcfg.test_tasks) if tcfg.test_tasks else [],
            held_out=held_out, streams=streams, earlier_trained=earlier_training(cfg.model.get("init_from")),
            closers=(keyer.close,),
            checkpoints=checkpoints, tracker=tracker, dynamic_sampling=dynamic_sampling,
            warm_start=WarmStart(modes, sft, rft, replace(build_expert_play(cfg), streams=streams),
                                 settings.seed, lambda: stack.workflow("rollout")) if modes else None,
            floor=random_floor_player(cfg, settings),
            task_depth=build_task_depth(cfg),
            privileged_context=build_privileged_context(cfg) if algorithm.teacher_is_self else None,
        )
        trainer = Trainer(settings, parts)
        started.pop_all()  # from here the trainer closes them (Trainer.close)
    return trainer


def trainer_settings(cfg: DictConfig, title: str) -> TrainerSettings:
    """The loop's own section, typed by the schema, and the run-wide values it reads (its nested sections become
    parts, built here: the curriculum sampler, dynamic sampling, the producer's bound)."""
    engine = cfg.engine
    return TrainerSettings(
        trainer=typed(TrainerSchema, plain(cfg.trainer)), seed=int(cfg.seed), max_turns=int(cfg.agent.max_turns),
        title=title, max_staleness=max_staleness(cfg),
        engine_sleeps=bool(engine.get("colocate", False) or engine.get("enable_sleep_mode", False)),
        push_from_learner_ranks=engine.get("weight_sync") == "process_group")


def schedule_steps(cfg: DictConfig, learner: LearnerConfig, warm_start_steps: int) -> int:
    """The LR schedule's length: the run's optimizer steps, RL (an upper bound per iteration) and warm starts."""
    return int(cfg.trainer.iterations) * optimizer_steps_per_iteration(cfg, learner) + warm_start_steps


def random_floor_player(cfg: DictConfig, settings: TrainerSettings) -> Floor | None:
    """`trainer.eval_floor`: plays the random-admissible-action floor on the eval tasks (none for env=agent)."""
    if not settings.trainer.eval_floor or cfg.env.name == "agent":
        return None
    from agentforge.evaluation.floor import random_floor

    env_name, env_options = str(cfg.env.name), without_name(cfg.env)
    episodes, seed = settings.trainer.eval_group_size, settings.seed
    return lambda tasks: random_floor(env_name, env_options, tasks, settings.max_turns, episodes, seed)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def warn_about_the_objective(learner_cfg: Any) -> None:
    """Combinations that run but train worse than the user probably expects, said once at start."""
    spec = learner_cfg.objective_spec()
    if spec.policy_loss == "gspo" and learner_cfg.old_logprobs == "engine" and max(spec.clip.eps_low,
                                                                                   spec.clip.eps_high) < 0.01:
        log.warning("learner.loss.policy_loss=gspo clips the turn ratio at 1 +- %.0e, far below an engine's "
                    "log-prob mismatch (bf16 vLLM vs the learner: ~0.003 per token): with old_logprobs=engine it "
                    "clipped 19-27 %% of the tokens on the first step of each update (docs/objectives.md); set "
                    "learner.old_logprobs=recompute", max(spec.clip.eps_low, spec.clip.eps_high))
    loss = learner_cfg.loss
    if loss.agg_mode is not None and loss.policy_aggregation() != loss.aggregation():
        log.warning("learner.loss.agg_mode=%s aggregates the KL and entropy terms only: %s's policy term is always "
                    "%s (as verl)", loss.agg_mode, spec.policy_loss, loss.policy_aggregation())


def eval_descriptor_names(env_name: str, algorithm: Any) -> list[str]:
    """The descriptors whose diversity each eval reports: the env's built-ins plus the one the algorithm optimises."""
    from agentforge.algorithms.descriptors import descriptors_for_env

    names = descriptors_for_env(env_name)
    optimised = getattr(getattr(algorithm, "descriptor", None), "name", None)
    return names + [optimised] if optimised and optimised not in names else names
