"""The real ALFWorld text engine: textworld's PddlEnv wrapped the way the package's `AlfredTWEnv` wraps it.

textworld and alfworld are imported here only, on first use, so `import agentforge.envs` stays light.
"""

from __future__ import annotations

from typing import Any

from agentforge.errors import AgentforgeError

INSTALL_HINT = "install the ALFWorld engine with scripts/install_alfworld.sh (alfworld==0.4.2, textworld[pddl]==1.7.0)"


def _import_engine() -> tuple[Any, Any, Any, Any, Any]:
    try:
        import textworld
        from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredExpert, AlfredInfos
        from textworld.envs import PddlEnv
    except ImportError as err:
        raise AgentforgeError(f"the ALFWorld env needs textworld and alfworld ({err}); {INSTALL_HINT}") from err
    return textworld, PddlEnv, AlfredDemangler, AlfredInfos, AlfredExpert


def make_engine(planner: bool = False) -> Any:
    """A textworld env for ALFWorld games: admissible commands, `won`, the game file, and demangled names
    (`cabinet 1`) exactly as `AlfredTWEnv.init_env` requests them; `planner=True` adds the package's planner
    expert (`AlfredExpert(expert_type="planner")`, as `alfworld-generate --expert_type planner` uses)."""
    textworld, pddl_env, demangler, infos_wrapper, expert = _import_engine()
    request_infos = textworld.EnvInfos(won=True, admissible_commands=True, extras=["gamefile"])
    env = infos_wrapper(demangler(pddl_env(request_infos), shuffle=False))
    if planner:
        env = expert(env, expert_type="planner")
    return env


def release_engine(env: Any) -> None:
    """Close an engine.

    Its private copy of Fast Downward's library (~35 MB per PddlEnv) stays loaded: unloading it with
    `fast_downward.close_lib` leaves objects pointing into it that segfault the interpreter at exit. Envs create
    their engine once and reuse it across episodes, so this costs memory only when env objects are recreated.
    """
    env.close()
