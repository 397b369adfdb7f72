"""`agentforge launch slurm`: check the launch, render the sbatch script into the run dir, submit it (or print it).

The script (templates/ray_cluster.sbatch.j2) starts a Ray head on the first node and a Ray worker on each other node
through `srun`, waits for all of them to join (or fails naming the missing ones), runs `agentforge train` as the
Ray driver on the head, and tears everything down on any exit. This module only decides what goes into it.
"""

from __future__ import annotations

import datetime as dt
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import jinja2
from omegaconf import DictConfig

from agentforge.errors import AgentforgeError, ConfigError
from agentforge.launch.options import CONTROL, SlurmOptions, path_problems, split_launch_args

TEMPLATE = "ray_cluster.sbatch.j2"
SCRIPT_NAME = "job.sbatch"

# sbatch's refusals and how to fix each (matched on its message, lower case)
SBATCH_FIXES = (
    ("invalid partition", "list the partitions with `sinfo -s` and pass partition=<name>"),
    ("invalid account", "list your accounts with `sacctmgr show assoc user=$USER format=account,partition` and pass "
                        "account=<name>"),
    ("account", "check account=<name> against `sacctmgr show assoc user=$USER`"),
    ("node configuration is not available", "ask for fewer nodes, CPUs or GPUs per node, or another "
                                            "partition/constraint (`sinfo -o '%P %D %c %G %f'` shows what exists)"),
    ("time limit", "lower time= below the partition's limit (`sinfo -o '%P %l'`)"),
    ("qos", "pass a QOS you may use through extra_sbatch=[--qos=<name>] (`sacctmgr show assoc user=$USER`)"),
    ("invalid feature", "constraint= names a node feature the cluster lacks; `sinfo -o '%f'` lists them"),
)


class LaunchError(AgentforgeError):
    """Slurm refused the job; the message carries sbatch's words and the fix."""


def derived_overrides(cfg: DictConfig, options: SlurmOptions, overrides: list[str]) -> list[str]:
    """What a multi-node run needs on top of the user's overrides (each only when the user did not set it)."""
    given = {o.split("=", 1)[0].lstrip("+~") for o in overrides}
    extra: list[str] = []
    ranks = int(cfg.learner.num_ranks)
    if ranks > 1 and "learner.in_process" not in given:
        extra.append("learner.in_process=false")  # several ranks are Ray actors
    if options.nodes > 1:
        if "learner.placement_strategy" not in given and ranks > 1:
            extra.append("learner.placement_strategy=SPREAD")  # ranks over the nodes, not packed onto the head
        if not any(key.startswith("env_pool.actor_options") for key in given) and cfg.env_pool.kind == "ray":
            # Ray's SPREAD ignores actors that request nothing (measured: 4 zero-CPU actors all landed on one node
            # of two); a hundredth of a CPU makes it alternate nodes, and still fits hundreds of workers
            extra.append("++env_pool.actor_options={num_cpus:0.01,scheduling_strategy:SPREAD}")
    return extra


def check_slots(cfg: DictConfig, options: SlurmOptions) -> None:
    """More learner ranks than the allocation can hold would wait for resources until the time limit: refuse now."""
    ranks = int(cfg.learner.num_ranks)
    per_rank = 1 if options.gpus_per_node else int(cfg.learner.get("num_cpus_per_rank", 1))
    slots = options.slots // per_rank - engine_gpus(cfg, options)  # the engine's GPUs are not learner slots
    if ranks > slots:
        unit = "GPU" if options.gpus_per_node else f"{per_rank} CPU(s)"
        engine = " (the engine takes engine.tensor_parallel_size GPUs of the head)" if options.gpus_per_node else ""
        raise ConfigError(
            f"learner.num_ranks={ranks} needs {ranks} slots of one {unit} each, but nodes={options.nodes} x "
            f"{options.gpus_per_node or options.cpus_per_node} {'GPUs' if options.gpus_per_node else 'CPUs'} per "
            f"node give {slots}{engine}; lower learner.num_ranks or raise nodes / "
            f"{'gpus_per_node' if options.gpus_per_node else 'cpus_per_node'}")
    strategy = str(cfg.learner.get("placement_strategy", "PACK"))
    if strategy == "STRICT_SPREAD" and ranks > options.nodes:
        raise ConfigError(f"learner.placement_strategy=STRICT_SPREAD puts one rank per node, but num_ranks={ranks} > "
                          f"nodes={options.nodes}; use SPREAD or more nodes")


def engine_gpus(cfg: DictConfig, options: SlurmOptions) -> int:
    """GPUs the in-driver engine takes on the head node (its tensor-parallel size), kept out of Ray's pool there."""
    if not options.gpus_per_node:
        return 0
    needed = int(cfg.engine.get("tensor_parallel_size", 1) or 1)
    if needed >= options.gpus_per_node and options.nodes == 1 and int(cfg.learner.num_ranks) > 0 \
            and not cfg.learner.in_process:
        raise ConfigError(f"engine.tensor_parallel_size={needed} takes every GPU of the only node "
                          f"(gpus_per_node={options.gpus_per_node}), leaving none for the learner ranks; lower it or "
                          "add nodes")
    return needed


def default_run_dir() -> Path:
    return Path("runs/train") / f"{dt.datetime.now():%Y-%m-%d_%H-%M-%S}-slurm"


def render(options: SlurmOptions, overrides: list[str], run_dir: Path, workdir: Path,
           bin_prefix: str | None = None, engine_gpus: int = 0) -> str:
    """The sbatch script's text; `overrides` go to `agentforge train` (quoted), run dir and resume added."""
    env = jinja2.Environment(loader=jinja2.PackageLoader("agentforge.launch", "templates"),
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False,
                             comment_start_string="{=#", comment_end_string="#=}")  # bash has ${#array[@]}
    env.filters["q"] = shlex.quote
    train_args = [*overrides, "hydra.run.dir=$RUN_DIR", "resume=auto"]
    quoted = " ".join(a if a == "hydra.run.dir=$RUN_DIR" else shlex.quote(a) for a in train_args)
    quoted = quoted.replace("hydra.run.dir=$RUN_DIR", '"hydra.run.dir=$RUN_DIR"')
    shown = " ".join(shlex.quote(a) for a in [*overrides, f"hydra.run.dir={run_dir}", "resume=auto"])
    if bin_prefix is None:  # the venv this launch runs from (on a shared filesystem), or the image's PATH
        bin_prefix = "" if options.image else str(Path(sys.executable).parent) + "/"
    run_in = ""
    if options.image:
        nv = "--nv " if options.gpus_per_node else ""
        run_in = f"apptainer exec {nv}--bind {shlex.quote(str(run_dir))} {shlex.quote(options.image)}"
    return env.get_template(TEMPLATE).render(
        o=options, run_dir=str(run_dir), workdir=str(workdir), overrides=quoted,
        trainer_line=f"trainer: agentforge train {shown}",
        bin_prefix=bin_prefix, run_in=run_in, object_store_bytes=int(options.object_store_gb * 1024**3),
        rendered_at=f"{dt.datetime.now():%Y-%m-%d %H:%M:%S}", script_path=str(run_dir / SCRIPT_NAME),
        engine_gpus=engine_gpus,
    )


def submit(script: Path) -> str:
    """`sbatch --parsable`; its refusal becomes a LaunchError with sbatch's message and the fix."""
    if shutil.which("sbatch") is None:
        raise LaunchError("sbatch is not on PATH: run this on a Slurm login node (or `--dry-run` to see the script)")
    proc = subprocess.run(["sbatch", "--parsable", str(script)], capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        message = (proc.stderr or proc.stdout).strip()
        lowered = message.lower()
        fix = next((fix for needle, fix in SBATCH_FIXES if needle in lowered), "fix the option sbatch names above")
        raise LaunchError(f"Slurm refused the job:\n  {message}\nFix: {fix}. The script is {script}")
    return proc.stdout.strip().split(";")[0]


def launch_slurm(args: list[str]) -> int:
    """The command: check, render into the run dir, then submit or (`--dry-run`) print."""
    from agentforge.errors import ConfigProblems
    from agentforge.schema.compose import compose_config
    from agentforge.schema.overrides import override_problems

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
    from agentforge.schema.config_check import check_config

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
