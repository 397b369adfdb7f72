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
from agentforge.launch.options import SlurmOptions

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
