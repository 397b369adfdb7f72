"""`agentforge launch slurm` options: what the job asks of Slurm and of its Ray cluster, split from the Hydra
overrides that go to `agentforge train`, and checked before anything is submitted."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from agentforge.errors import ConfigError
from agentforge.schema.registry import owns_section

TIME_FORMATS = "MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS"
# the template's ports: ray_port + 10 + 20*slot (daemons), ray_port + 1000 + 150*slot (workers), slot < 16
PORT_SPAN = 3500


@owns_section("launch")
@dataclass
class SlurmOptions:
    """One launch. Defaults suit a small CPU job; GPU jobs set `gpus_per_node`."""

    option_help: ClassVar[dict[str, str]] = {
        "nodes": "Slurm nodes (the Ray head on the first)", "cpus_per_node": "CPUs per node",
        "gpus_per_node": "GPUs per node (0: a CPU job)", "partition": "Slurm partition (null: the default)",
        "account": "Slurm account", "time": "Slurm's time limit (null: the partition's default)",
        "constraint": "Slurm --constraint", "mem": "memory per node, Slurm syntax (e.g. 64G)",
        "image": "a container image (.sif or docker://...): every node's commands run in `apptainer exec`",
        "job_name": "the Slurm job name", "ray_port": "GCS port on the head; the other Ray ports derive from it",
        "object_store_gb": "Ray object store per node (GiB)",
        "join_timeout": "seconds for every node to join the Ray cluster before the job fails",
        "signal_seconds": "SIGUSR1 this long before the time limit: checkpoint, stop, requeue",
        "run_dir": "the run dir (default runs/train/<time>-slurm; on a filesystem every node sees)",
        "extra_sbatch": "more #SBATCH lines, e.g. [--qos=high]",
    }

    nodes: int = 1
    cpus_per_node: int = 2
    gpus_per_node: int = 0
    partition: str | None = None
    account: str | None = None
    time: str | None = None  # Slurm's time limit; None: the partition's default
    constraint: str | None = None
    mem: str | None = None  # per node, Slurm syntax (e.g. 64G); None: the partition's default
    image: str | None = None  # a container image: every node's commands run in `apptainer exec`
    job_name: str = "agentforge"
    ray_port: int = 6379  # GCS port on the head; each node's other Ray ports are derived from it (below)
    object_store_gb: float = 2.0  # per node
    join_timeout: int = 180  # seconds for every node to join the Ray cluster before the job fails
    signal_seconds: int = 300  # SIGUSR1 this long before the time limit: checkpoint, stop, requeue
    run_dir: str | None = None  # default: runs/train/<time>-slurm (must be on a filesystem every node sees)
    extra_sbatch: list[str] = field(default_factory=list)  # more `#SBATCH` lines, e.g. ["--qos=high"]

    @property
    def slots(self) -> int:
        """Learner rank slots: one per GPU, or per CPU when there are no GPUs (each rank takes num_cpus_per_rank)."""
        return self.nodes * (self.gpus_per_node or self.cpus_per_node)


INT_FIELDS = {"nodes", "cpus_per_node", "gpus_per_node", "ray_port", "join_timeout", "signal_seconds"}
FLOAT_FIELDS = {"object_store_gb"}
KEYS = {f.name for f in dataclasses.fields(SlurmOptions)}
NULLABLE = {f.name for f in dataclasses.fields(SlurmOptions) if f.default is None}


def split_launch_args(args: list[str]) -> tuple[SlurmOptions, list[str], bool]:
    """`key=value` launch options apart from the train overrides; returns (options, overrides, dry_run)."""
    values: dict[str, object] = {}
    overrides: list[str] = []
    dry_run = False
    for arg in args:
        if arg in ("--dry-run", "--dry_run"):
            dry_run = True
            continue
        if arg.startswith("-"):
            raise ConfigError(f"unknown flag {arg!r} for `agentforge launch slurm`; its only flag is --dry-run "
                              "(Hydra's --multirun sweeps go through hydra/launcher=submitit_slurm instead)")
        key, sep, value = arg.partition("=")
        if sep and key in KEYS:
            values[key] = _parse(key, value)
        else:
            overrides.append(arg)
    options = SlurmOptions(**values)  # type: ignore[arg-type]
    check_options(options)
    return options, overrides, dry_run


def _parse(key: str, value: str) -> object:
    if key == "extra_sbatch":
        return [v.strip() for v in value.strip("[]").split(",") if v.strip()]
    if value in ("", "null", "None"):
        if key in INT_FIELDS | FLOAT_FIELDS:
            return _bad(key, value, "a number")
        return None if key in NULLABLE else _bad(key, value, "given (it has no null)")
    try:
        if key in INT_FIELDS:
            return int(value)
        if key in FLOAT_FIELDS:
            return float(value)
    except ValueError:
        return _bad(key, value, "an integer" if key in INT_FIELDS else "a number")
    return value


def _bad(key: str, value: str, what: str) -> object:
    raise ConfigError(f"{key}={value!r} must be {what}")


def check_options(o: SlurmOptions) -> None:
    """Reject what Slurm or Ray would only reject after the job waited in the queue."""
    problems: list[str] = []
    if o.nodes < 1:
        problems.append(f"nodes={o.nodes} must be >= 1")
    if o.cpus_per_node < 1:
        problems.append(f"cpus_per_node={o.cpus_per_node} must be >= 1")
    if o.gpus_per_node < 0:
        problems.append(f"gpus_per_node={o.gpus_per_node} must be >= 0")
    if not 1024 <= o.ray_port <= 65535 - PORT_SPAN:
        problems.append(f"ray_port={o.ray_port} must be in 1024..{65535 - PORT_SPAN} (the nodes use ports above it)")
    if o.object_store_gb <= 0:
        problems.append(f"object_store_gb={o.object_store_gb} must be > 0")
    if o.join_timeout < 10:
        problems.append(f"join_timeout={o.join_timeout} s is too short for Ray to start; use >= 10")
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", o.job_name):
        problems.append(f"job_name={o.job_name!r}: use letters, digits, '_', '.', '-'")
    if o.time is not None:
        limit = time_limit_seconds(o.time)
        if limit is None:
            problems.append(f"time={o.time!r} is not a Slurm time; use {TIME_FORMATS}")
        elif o.signal_seconds >= limit:
            problems.append(f"signal_seconds={o.signal_seconds} is not shorter than time={o.time} ({limit} s): the "
                            "stop warning would come before the job starts; lower signal_seconds")
    if o.signal_seconds < 30:
        problems.append(f"signal_seconds={o.signal_seconds}: leave >= 30 s to finish an iteration and checkpoint")
    if o.image is not None and not (o.image.endswith((".sif", ".simg")) or "://" in o.image or Path(o.image).exists()):
        problems.append(f"image={o.image!r} is neither an Apptainer image file (.sif) nor a URI (docker://...); "
                        "build one with `apptainer build agentforge.sif docker-daemon://agentforge:gpu`")
    problems += directive_problems(o)
    if problems:
        raise ConfigError("agentforge launch slurm: invalid options:\n  - " + "\n  - ".join(problems))


# what an #SBATCH line may hold: a control character (a newline) would end the line and start a shell line; a space
# ends the option for sbatch's parser
CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def directive_problems(o: SlurmOptions) -> list[str]:
    """The values rendered into `#SBATCH` lines and the script, checked: no control characters, no spaces where
    sbatch would cut the option."""
    problems = []
    texts = {k: getattr(o, k) for k in ("partition", "account", "time", "constraint", "mem", "image", "run_dir")}
    texts.update({f"extra_sbatch[{i}]": line for i, line in enumerate(o.extra_sbatch)})
    for key, value in texts.items():
        if value is None:
            continue
        if CONTROL.search(str(value)):
            problems.append(f"{key}={value!r} holds a control character (a newline would add a shell line to the "
                            "job script); remove it")
        elif key not in ("image", "run_dir") and not key.startswith("extra_sbatch") and any(c.isspace() for c in value):
            problems.append(f"{key}={value!r} holds a space; Slurm's {key} values have none")
    return problems


def path_problems(label: str, path: Path) -> list[str]:
    """A path that goes into `#SBATCH --chdir/--output`: sbatch cuts an option at whitespace."""
    text = str(path)
    if CONTROL.search(text):
        return [f"{label} {text!r} holds a control character; choose a path without one"]
    if any(c.isspace() for c in text):
        return [f"{label} {text!r} holds a space, which sbatch's #SBATCH --chdir/--output cannot take; choose a "
                f"path without spaces (run_dir=...), or launch from a directory without them"]
    return []


def time_limit_seconds(text: str) -> int | None:
    """Slurm's time formats in seconds; None when `text` is not one (UNLIMITED/infinite count as no limit: 10^9)."""
    if text.lower() in ("unlimited", "infinite"):
        return 10**9
    days = 0
    rest = text
    if "-" in text:
        day_part, rest = text.split("-", 1)
        if not day_part.isdigit():
            return None
        days = int(day_part)
    parts = rest.split(":")
    if not all(p.isdigit() for p in parts) or not 1 <= len(parts) <= 3:
        return None
    nums = [int(p) for p in parts]
    if days or "-" in text:  # D-HH, D-HH:MM, D-HH:MM:SS
        h, m, s = (nums + [0, 0])[:3]
    elif len(nums) == 1:  # MM
        h, m, s = 0, nums[0], 0
    elif len(nums) == 2:  # MM:SS
        h, m, s = 0, nums[0], nums[1]
    else:
        h, m, s = nums
    return ((days * 24 + h) * 60 + m) * 60 + s
