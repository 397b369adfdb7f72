"""`eval.interventions=true`: the TJPO paper's Table 5 for one policy on ALFWorld's intervention cases.

The same policy plays every case (a task with two independent source-location categories, one of them forbidden)
under Standard, User Constraints and Disruption (the `alfworld_intervention` env's conditions), from the same
sampling seed. Standard and Disruption count wins; User Constraints counts a win only with no engine-confirmed
visit to a forbidden location (compliant success).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentforge import conf  # the packaged config groups (top-level conf/ in a checkout)
from agentforge.errors import ConfigError
from agentforge.evaluation.evaluator import Evaluator
from agentforge.evaluation.settings import EvalSettings
from agentforge.tasks import TaskSampler
from agentforge.types import Group

INTERVENTION_ENV = "alfworld_intervention"


def check_intervention_env(env_name: str, cases: str) -> int:
    """Fail before any start-up when interventions cannot run; returns the number of cases."""
    from agentforge.envs.alfworld.intervention_cases import num_cases

    if not env_name.startswith("alfworld"):
        raise ConfigError(f"eval.interventions=true runs ALFWorld's intervention cases, but the recipe's env is "
                          f"{env_name!r}; use an ALFWorld recipe (recipe=tjpo_alfworld) or eval.interventions=false")
    return num_cases(cases)  # a missing or empty case file fails here, naming the file and how to build one


def intervention_template(env_name: str) -> Any:
    """The intervention env's prompt template (registered as ALFWorld's: the observations are ALFWorld's own)."""
    from agentforge.agent.prompts import prompt_for

    return prompt_for(env_name)


def intervention_env_options(condition: str, cases: str, max_steps: int) -> dict[str, Any]:
    """The `alfworld_intervention` env group's defaults (conf/env/alfworld_intervention.yaml) with the condition, the
    case file and the recipe's step limit."""
    import yaml

    defaults = yaml.safe_load((Path(conf.__file__).parent / "env" / f"{INTERVENTION_ENV}.yaml").read_text()) or {}
    defaults.pop("name", None)
    defaults.pop("defaults", None)  # the Hydra defaults list (its schema's defaults), not an env option
    return {**defaults, "condition": condition, "cases": cases, "max_steps": max_steps}


def intervention_pool(pool_section: dict[str, Any], condition: str, cases: str, max_steps: int) -> Any:
    """An env pool like the run's (`env_pool`'s kind and options) over the intervention env in `condition`."""
    from agentforge.hosting.pool import make_pool

    pool_options = dict(pool_section)
    kind = pool_options.pop("kind")
    return make_pool(kind, INTERVENTION_ENV, intervention_env_options(condition, cases, max_steps), **pool_options)


def condition_summary(groups: list[Group], condition: str) -> dict[str, float]:
    from agentforge.envs.alfworld.interventions import intervention_success

    trajectories = [t for g in groups for t in g.trajectories]
    n = max(1, len(trajectories))
    return {
        "success_rate": sum(intervention_success(t, condition) for t in trajectories) / n,
        "win_rate": sum(t.won for t in trajectories) / n,
        "forbidden_visit_rate": sum(any(turn.info.get("forbidden_visit") for turn in t.turns)
                                    for t in trajectories) / n,
        "rejected_rate": sum(any(turn.info.get("rejected") for turn in t.turns) for t in trajectories) / n,
        "mean_turns": sum(t.length for t in trajectories) / n,
    }


def run_interventions(evaluator: Evaluator, settings: EvalSettings, label: str, pool_section: dict[str, Any],
                      max_steps: int) -> tuple[dict[str, Any], dict[str, list[Group]]]:
    """Play every case under each condition (in pools like the run's, `pool_section`, with the recipe's step limit);
    returns the summary (eval.json's `interventions`) and the groups."""
    from agentforge.envs.alfworld.intervention_cases import num_cases
    from agentforge.envs.alfworld.interventions import CONDITIONS

    cases = str(settings.intervention_cases)
    count = num_cases(cases)
    samples = int(settings.intervention_samples or settings.samples_per_task)
    tasks = TaskSampler(INTERVENTION_ENV, settings.split).sample(count)  # seed i of a split plays case i mod count
    template = intervention_template(INTERVENTION_ENV)
    per_condition: dict[str, dict[str, float]] = {}
    played: dict[str, list[Group]] = {}
    for condition in CONDITIONS:
        pool = intervention_pool(pool_section, condition, cases, max_steps)
        try:
            ctx = evaluator.ctx.with_sampling(evaluator.sampling).with_pool(pool, template)
            groups = evaluator.play(ctx, tasks, samples, f"{label} · {condition}").groups
        finally:
            pool.close()
        per_condition[condition] = condition_summary(groups, condition)
        played[condition] = groups
    summary = {
        "name": label, "cases": cases, "num_cases": count, "samples_per_case": samples,
        "episodes_per_condition": count * samples,
        "success_rate": {c: s["success_rate"] for c, s in per_condition.items()},
        "conditions": per_condition,
    }
    return summary, played
