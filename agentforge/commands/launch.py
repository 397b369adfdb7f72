"""`agentforge launch slurm recipe=...`: check the run as `agentforge train` would, render the job script
(`launch.slurm`), and submit it (or print it with --dry-run)."""

from __future__ import annotations

import sys
from pathlib import Path

from agentforge.errors import ConfigError
from agentforge.launch.options import CONTROL, path_problems, split_launch_args
from agentforge.launch.slurm import (
    SCRIPT_NAME,
    check_slots,
    default_run_dir,
    derived_overrides,
    engine_gpus,
    render,
    submit,
)


def launch_slurm(args: list[str]) -> int:
    """The command: check, render into the run dir, then submit or (`--dry-run`) print."""
    from agentforge.commands.overrides import override_problems
    from agentforge.errors import ConfigProblems
    from agentforge.schema.compose import compose_config

    options, overrides, dry_run = split_launch_args(args)
    if not any(o.split("=", 1)[0] == "recipe" for o in overrides):
        raise ConfigError("agentforge launch slurm needs recipe=<name> (as `agentforge train` would run it)")
    hydra_args = [o for o in overrides if o.startswith(("hydra.", "hydra/"))]
    problems, _ = override_problems(["command=train", *(o for o in overrides if o not in hydra_args)])
    if problems:  # every mistake at once, as `agentforge train` says them (exit 2), never Hydra's traceback
        raise ConfigProblems(problems)
    cfg = compose_config(["command=train", *(o for o in overrides if o not in hydra_args)])
    extra = derived_overrides(cfg, options, overrides)
    if extra:
        cfg = compose_config(["command=train", *(o for o in overrides if o not in hydra_args), *extra])
    check_slots(cfg, options)
    from agentforge.commands.config_check import check_config

    check_config(cfg)  # the same checks `agentforge train` makes first, before the job waits in a queue
    workdir = Path.cwd()
    run_dir = Path(options.run_dir or default_run_dir())
    run_dir = run_dir if run_dir.is_absolute() else (workdir / run_dir)
    problems = [*path_problems("the working directory", workdir), *path_problems("run_dir", run_dir),
                *[f"override {o!r} holds a control character (a newline would add a shell line to the job script)"
                  for o in overrides if CONTROL.search(o)]]
    if problems:
        raise ConfigProblems(problems)
    text = render(options, [*overrides, *extra], run_dir, workdir, engine_gpus=engine_gpus(cfg, options))
    if dry_run:
        print(text, end="")
        return 0
    run_dir.mkdir(parents=True, exist_ok=True)
    script = run_dir / SCRIPT_NAME
    script.write_text(text)
    job = submit(script)
    (run_dir / "slurm_job_id").write_text(job + "\n")
    print(f"submitted Slurm job {job}: {options.nodes} node(s); run dir {run_dir}\n"
          f"  log: {run_dir}/slurm-{job}.out   script: {script}   cancel: scancel {job}")
    return 0


def launch_command(args: list[str]) -> int:
    """`agentforge launch <backend> ...`; Slurm is the one backend."""
    if not args or args[0] in ("-h", "--help", "help"):
        print(LAUNCH_USAGE)
        return 0
    if args[0] != "slurm":
        print(f"agentforge: unknown launcher {args[0]!r}; use: agentforge launch slurm ...", file=sys.stderr)
        return 2
    return launch_slurm(args[1:])


LAUNCH_USAGE = """usage: agentforge launch slurm recipe=<name> [launch options] [train overrides] [--dry-run]

launch options (everything else goes to `agentforge train`):
  nodes=2 cpus_per_node=16 gpus_per_node=4 partition=gpu account=proj time=1-00:00:00 constraint=a100 mem=256G
  image=agentforge.sif (Apptainer) job_name=... ray_port=6379 object_store_gb=2 join_timeout=180
  signal_seconds=300 (SIGUSR1 before the time limit: checkpoint, requeue) run_dir=... extra_sbatch=[--qos=high]

examples:
  agentforge launch slurm recipe=tjpo_alfworld nodes=2 cpus_per_node=16 time=12:00:00 --dry-run
  agentforge launch slurm recipe=gigpo_sokoban model=hf model.path=Qwen/Qwen2.5-7B-Instruct nodes=2 gpus_per_node=4 \\
      learner.num_ranks=4 learner.zero_stage=3 engine.tensor_parallel_size=2 partition=gpu account=myproj \\
      time=1-00:00:00
"""
