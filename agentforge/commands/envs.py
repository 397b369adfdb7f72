"""`agentforge envs list | check [NAME ...]`: what is registered, and whether each env builds and steps here.

`check` builds each named env (default: every registered one), resets it on a task and plays random admissible
actions. The `agent` env kind is not an env to step (an external agent drives it through the gateway): it is
listed as such and never counted as a failure. Exit status 0 when every checked env passed, 1 otherwise, 2 for
unknown names.
"""

from __future__ import annotations

import random
import sys
import time

from agentforge.errors import AgentforgeError

MAX_STEPS = 20

USAGE = f"""usage: agentforge envs list
       agentforge envs check [NAME ...]

  list              the registered environments (one a line; `agent` is the gateway's external-agent kind)
  check [NAME ...]  build each named env (default: all), reset it on a task and play up to {MAX_STEPS} random actions;
                    prints `NAME: ok (...)` or why it is unavailable (a missing extra or data, with the fix).
                    Exit status 0 when every checked env passed, 1 when one failed, 2 for an unknown name.

examples:
  agentforge envs check                   every env (the `agent` kind is skipped: it is not stepped)
  agentforge envs check sokoban search_qa
"""


def envs_command(args: list[str]) -> int:
    if any(a in ("-h", "--help", "help") for a in args):
        print(USAGE)
        return 0
    from agentforge.envs import ENVS

    action, names = (args[0], args[1:]) if args else ("list", [])
    if action == "list":
        if names:
            print(f"agentforge envs list takes no names (got {' '.join(names)}); see agentforge envs --help",
                  file=sys.stderr)
            return 2
        for name in ENVS.names():
            print(name)
        return 0
    if action != "check":
        print(f"unknown envs action {action!r}; use: agentforge envs list | agentforge envs check [NAME ...]",
              file=sys.stderr)
        return 2
    unknown = [n for n in names if n not in ENVS]
    if unknown:
        print(f"unknown env(s) {', '.join(unknown)}; registered envs: {', '.join(ENVS.names())}", file=sys.stderr)
        return 2
    failures = sum(not check_env(name) for name in (names or ENVS.names()))
    return 1 if failures else 0


def check_env(name: str) -> bool:
    """Build, reset and randomly step one env; print the outcome; True unless it failed."""
    from agentforge.envs.agent import AGENT_ENV
    from agentforge.envs.base import make_env
    from agentforge.tasks import task_sampler

    if name == AGENT_ENV:
        print(f"{name}: skipped (not an env to step: an external agent drives it through the gateway; check its "
              "task env instead, e.g. agentforge envs check search_qa)")
        return True
    started = time.monotonic()
    try:
        env = make_env(name)
        try:
            obs = env.reset(task_sampler(name, None).sample(1)[0])  # env=mix: a task of its first member
            steps, done = 0, False
            while not done and steps < MAX_STEPS:
                result = env.step(random.choice(obs.admissible or ["look"]))
                obs, done, steps = result.observation, result.done, steps + 1
        finally:
            env.close()
    except AgentforgeError as error:  # a missing extra or data: say which, keep checking the others
        print(f"{name}: unavailable: {error}")
        return False
    except Exception as error:  # noqa: BLE001  (a bug in one env must not hide the others' results)
        print(f"{name}: failed: {type(error).__name__}: {error}")
        return False
    print(f"{name}: ok ({steps} random steps, {time.monotonic() - started:.1f} s)")
    return True
