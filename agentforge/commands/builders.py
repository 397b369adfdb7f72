"""Build the parts (model spec, engine, env pool, rollout context) from a composed Hydra config."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from agentforge.agent.prompts import PromptTemplate, prompt_for
from agentforge.agent.render import AgentConfig
from agentforge.engines import make_engine
from agentforge.engines.base import RolloutEngine
from agentforge.engines.interventions import InterventionSpec
from agentforge.errors import ConfigError
from agentforge.hosting.pool import EnvPool, make_pool
from agentforge.models.loading import ModelSpec, resolve_model
from agentforge.reliability.closing import close_quietly
from agentforge.rollout.stack import RolloutStack
from agentforge.rollout.workflow import RolloutContext
from agentforge.tasks import mix_weights
from agentforge.types import SamplingConfig


def plain(node: Any) -> Any:
    """A config node as plain Python containers (resolved)."""
    return OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else node


def without_name(node: Any) -> dict[str, Any]:
    options = dict(plain(node))
    options.pop("name", None)
    return options


def prepare_run_dir(cfg: DictConfig, run_dir: Path | None = None) -> Path:
    """Create the run folder and write the resolved config into it (what every command's run starts with)."""
    from agentforge.tracking.redact import redact, redact_hydra_files

    run_dir = run_dir or Path(cfg.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    resolved = OmegaConf.to_container(cfg, resolve=True)
    cleaned = redact(resolved)  # secrets (api keys, tokens) never land in the run's records
    (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True) if cleaned == resolved
                                         else OmegaConf.to_yaml(OmegaConf.create(cleaned)))
    redact_hydra_files(run_dir)
    return run_dir


def build_model_spec(cfg: DictConfig) -> ModelSpec:
    """The model to load; `model.init_from=<HF folder>` (e.g. an SFT run's `model/`) replaces its weights."""
    model_cfg = dict(plain(cfg.model))
    init_from = model_cfg.pop("init_from", None)
    spec = resolve_model(model_cfg)
    if init_from:
        path = Path(str(init_from))
        if not (path / "config.json").exists():
            raise ConfigError(f"model.init_from={init_from} is not an HF model folder (no config.json); point it at an "
                              "SFT run's model/ folder")
        spec = replace(spec, path=str(path), name=f"{spec.name}@{path}")
    return spec


def build_engine(cfg: DictConfig, spec: ModelSpec) -> RolloutEngine:
    options = without_name(cfg.engine)
    if options.get("kv_cache_space_gb") == "auto":
        options["kv_cache_space_gb"] = workload_kv_cache_gb(cfg, spec)
    options.pop("kv_cache_max_gb", None)
    if options.get("logprobs_mode", "auto") == "auto":
        options["logprobs_mode"] = engine_logprobs_mode(cfg)
    from agentforge.engines.replicas.options import ReplicaOptions
    from agentforge.engines.shared import shared_engine, sharing

    name = str(cfg.engine.name)
    replicas, options = ReplicaOptions.split(options)
    if replicas.enabled:  # Ray-hosted engines behind a router (agentforge/engines/replicas/)
        from agentforge.engines.replicas import ReplicatedEngine

        return ReplicatedEngine(name, spec, options, replicas)
    if sharing() and name == "vllm":  # the test suite: one vLLM engine for all runs with the same settings
        return shared_engine(name, spec, options, lambda: make_engine(name, spec, options))
    return make_engine(name, spec, options)


def engine_logprobs_mode(cfg: DictConfig) -> str:
    """`engine.logprobs_mode: auto`: a training run sampling at a temperature other than 1 needs the log-probs of
    the tempered distribution it sampled from (processed), the learner's convention; anything else keeps the raw
    model log-probs (what vLLM's fast GPU sampler supports)."""
    trains = str(cfg.get("command")) in ("train",)
    return "processed_logprobs" if trains and float(cfg.agent.sampling.temperature) != 1.0 else "raw_logprobs"


def concurrent_sequences(cfg: DictConfig) -> int:
    """How many sequences the command's largest rollout generates at once (bounded by the engine's max_num_seqs)."""
    if cfg.command == "train":
        t = cfg.trainer
        n = max(int(t.tasks_per_iteration) * int(t.group_size), int(t.eval_tasks) * int(t.eval_group_size))
    elif cfg.command == "eval":
        n = int(cfg.eval.num_tasks) * int(cfg.eval.samples_per_task)
    else:
        n = int(cfg.rollout.num_tasks) * int(cfg.rollout.group_size)
    return min(n, int(cfg.engine.get("max_num_seqs", n)))


def kv_bytes_per_token(spec: ModelSpec, dtype: str) -> int:
    """Key and value bytes one token occupies in the KV cache, from the model's config and the engine's dtype."""
    import json

    hf = json.loads((Path(spec.path) / "config.json").read_text())
    heads = int(hf["num_attention_heads"])
    head_dim = int(hf.get("head_dim") or int(hf["hidden_size"]) // heads)
    kv_heads = int(hf.get("num_key_value_heads") or heads)
    return 2 * int(hf["num_hidden_layers"]) * kv_heads * head_dim * (2 if dtype in ("bfloat16", "float16") else 4)


def workload_kv_cache_gb(cfg: DictConfig, spec: ModelSpec) -> float:
    """`engine.kv_cache_space_gb: auto`: room for every concurrent sequence at its longest (prompt budget plus new
    tokens), at least one `max_model_len` sequence, at most `engine.kv_cache_max_gb` (vLLM then runs fewer sequences
    at once). The KV cache is resident memory on a CPU: sizing it from the run keeps small runs small."""
    per_token = kv_bytes_per_token(spec, str(cfg.engine.get("dtype") or spec.dtype))
    max_len = int(cfg.engine.max_model_len)
    tokens = min(max_len, int(cfg.agent.max_prompt_tokens) + int(cfg.agent.sampling.max_new_tokens))
    wanted = concurrent_sequences(cfg) * tokens * per_token
    cap = float(cfg.engine.get("kv_cache_max_gb", 1.0)) * 2**30
    size = max(min(wanted, cap), max_len * per_token)
    return math.ceil(size / 2**24) / 64  # whole 1/64 GiB


def build_pool(cfg: DictConfig) -> EnvPool:
    pool_cfg = plain(cfg.env_pool)
    kind = pool_cfg.pop("kind")
    if cfg.env.name == "agent":  # an external agent drives its own env: no env workers to host
        kind, pool_cfg = "local", {}
    return make_pool(kind, cfg.env.name, without_name(cfg.env), **pool_cfg)


def build_expert_play(cfg: DictConfig) -> Any:
    """What expert data are played in (`training.sft.ExpertPlay`), from the run's env, agent and engine."""
    from agentforge.training.sft import ExpertPlay

    max_len = cfg.engine.get("max_model_len")  # vLLM's key; the HF engine has no bound
    return ExpertPlay(str(cfg.env.name), without_name(cfg.env), build_agent_config(cfg),
                      int(max_len) if max_len is not None else ExpertPlay.max_model_len)


def build_task_depth(cfg: DictConfig) -> Any:
    """A held-out task's depth (its expert solution's length, evaluation/depth.py), or None for an env without an
    expert (and for env=mix or agent: no single expert)."""
    from agentforge.envs.base import ENVS
    from agentforge.evaluation.depth import expert_depth

    name = str(cfg.env.name)
    if name in ("mix", "agent") or getattr(ENVS.get(name), "expert", None) is None:
        return None
    from agentforge.envs.base import expert_for

    return expert_depth(expert_for(name), without_name(cfg.env))


def build_privileged_context(cfg: DictConfig) -> Any:
    """Self-distillation's privileged context of a task: the env expert's solution as text (None where the expert
    cannot solve it)."""
    from agentforge.envs.base import expert_for

    env_name, env_options = str(cfg.env.name), without_name(cfg.env)
    expert = expert_for(env_name)

    def solution(task: Any) -> str | None:
        actions = expert(task, {**env_options, **dict(task.options)})
        return f"a solution of this task is the actions {', '.join(actions)}" if actions else None

    return solution


def build_agent_config(cfg: DictConfig) -> AgentConfig:
    agent = plain(cfg.agent)
    sampling = SamplingConfig(**agent.pop("sampling"))
    agent.pop("intervention", None)
    return AgentConfig(sampling=sampling, **agent)


def build_intervention(cfg: DictConfig) -> InterventionSpec | None:
    spec = plain(cfg.agent.get("intervention"))
    return InterventionSpec(kind=spec["kind"], params=spec.get("params", {})) if spec else None


def build_templates(cfg: DictConfig) -> tuple[PromptTemplate, dict[str, PromptTemplate]]:
    """The run's prompt template and, for `env=mix`, each member env's own (the first member's is the run's)."""
    weights = mix_weights(str(cfg.env.name), without_name(cfg.env))
    if weights is None:
        return prompt_for(cfg.env.name), {}
    templates = {name: prompt_for(name) for name in weights}
    return next(iter(templates.values())), templates


def build_rollout_context(cfg: DictConfig, engine: RolloutEngine, pool: EnvPool) -> RolloutContext:
    """What a rollout workflow plays with: the engine, the env pool, the env's prompt template (each member's, for
    env=mix), the agent config, the reward stages."""
    template, templates = build_templates(cfg)
    return RolloutContext(engine, pool, template, build_agent_config(cfg), build_intervention(cfg),
                          templates=templates, rewards=build_rewards(cfg, engine))


def build_rewards(cfg: DictConfig, engine: RolloutEngine | None = None) -> Any:
    """The run's reward stages (`reward` group; agentforge/rewards/), shared by every workflow of the run; `engine`
    for a judge that is the rollout engine's model."""
    from agentforge.rewards import RewardPipeline
    from agentforge.schema.groups import RewardSchema
    from agentforge.schema.options import typed

    return RewardPipeline.from_settings(typed(RewardSchema, plain(cfg.reward)), engine)


def build_workflow(cfg: DictConfig, algorithm: Any, purpose: str) -> Any:
    """The rollout workflow for `purpose`: the algorithm's own, or for `env=agent` the gateway workflow with the
    algorithm's rollout hooks (refused, with the reason, for an algorithm that needs to replay the env)."""
    if cfg.env.name != "agent":
        return algorithm.workflow(purpose)
    from agentforge.algorithms.base import Algorithm
    from agentforge.gateway.workflow import GatewayWorkflow

    reason = type(algorithm).not_gateway
    if reason is None and type(algorithm).workflow is not Algorithm.workflow:
        reason = "it plays episodes with its own rollout workflow"
    if reason:
        raise ConfigError(f"algorithm {algorithm.name!r} cannot train an external agent (env=agent): {reason}; use "
                          "grpo, gigpo, tjpo or t2po")
    return GatewayWorkflow(without_name(cfg.env), algorithm.rollout_hooks(purpose), int(cfg.engine.max_model_len))


def build_held_out(cfg: DictConfig, wanted: dict[str, int], seed_offsets: dict[str, int] | None = None) -> Any:
    """The run's held-out splits by content (agentforge/tasks/held_out.py): test, then eval, each at least
    `held_out.reserve` distinct tasks (more where `wanted` asks), printed as requested vs distinct; and the keyer,
    which the caller closes. For `env=mix`, each member has its own sets."""
    from agentforge.envs.task_keys import reserve_held_out
    from agentforge.tracking.progress import console

    held_out, keyer = reserve_held_out(str(cfg.env.name), without_name(cfg.env), int(cfg.held_out.reserve), wanted,
                                       seed_offsets, select=build_depth_selection(cfg))
    for line in held_out.describe():
        console.print(f"[yellow]{line}" if line == held_out.note else f"[dim]{line}", highlight=False)
    return held_out, keyer


def build_depth_selection(cfg: DictConfig) -> Any:
    """`held_out.min_depth` / `max_depth`: held-out tasks whose expert solution has that many moves (evaluation/
    depth.py); None when neither is set. An env without an expert cannot be selected so: a clear error."""
    low, high = cfg.held_out.get("min_depth"), cfg.held_out.get("max_depth")
    if low is None and high is None:
        return None
    depth = build_task_depth(cfg)
    if depth is None:
        raise ConfigError(f"held_out.min_depth / max_depth select held-out tasks by their expert solution's length, "
                          f"but env {cfg.env.name!r} has no single expert; leave them null")
    low, high = int(low or 1), int(high) if high is not None else None

    def select(task: Any) -> bool:
        d = depth(task)
        return d is not None and d >= low and (high is None or d <= high)

    return select


def build_training_streams(cfg: DictConfig, held_out: Any, keyer: Any) -> Any:
    """Every training stream of the run (RL tasks, curriculum, SFT and RFT warm starts) starts where the run seed
    says and skips the reserved held-out content (agentforge/tasks/held_out.py)."""
    from agentforge.envs.task_keys import digest
    from agentforge.tasks.held_out import TrainingFilter, TrainingStreams

    return TrainingStreams(int(cfg.seed), TrainingFilter(keyer.key, digest, held_out.reserved()))


def build_rollout_stack(cfg: DictConfig, spec: ModelSpec, purposes: Sequence[str],
                        after_engine: Callable[[RolloutEngine], None] | None = None) -> RolloutStack:
    """The engine (first: vLLM's start reseeds torch), `after_engine(engine)` (a checkpoint's weights pushed in, the
    run's seeding, Ray for the learner), the env pool, the rollout context, the algorithm (after the seeding: some
    draw from the seeded RNGs as they are built) and its workflow for each purpose (`build_workflow`). A start that
    fails part-way closes what it had started."""
    from agentforge.algorithms import make_algorithm

    with contextlib.ExitStack() as started:
        engine = build_engine(cfg, spec)
        started.callback(close_quietly, engine.close)
        if after_engine is not None:
            after_engine(engine)
        pool = build_pool(cfg)  # a Ray pool joins (or starts) the Ray runtime itself
        started.callback(close_quietly, pool.close)
        ctx = build_rollout_context(cfg, engine, pool)
        algorithm = make_algorithm(cfg.algorithm)
        workflows: dict[str, Any] = {}
        for purpose in purposes:
            workflows[purpose] = workflow = build_workflow(cfg, algorithm, purpose)
            if hasattr(workflow, "close"):
                started.callback(close_quietly, workflow.close)
        started.pop_all()
    return RolloutStack(engine, pool, ctx, algorithm, workflows)
