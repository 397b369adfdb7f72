"""Entry point: `agentforge <command> [hydra overrides]`, a thin shim over one Hydra app.

Hydra has no subcommands, so the shim turns the command into the `command=` override and hands the rest of the
command line (overrides, `--multirun`, `--cfg job`, ...) to Hydra unchanged.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable

import hydra
from omegaconf import DictConfig

from agentforge.errors import AgentforgeError, ConfigError
from agentforge.hardware import resolve_config_dtypes
from agentforge.reliability.interrupt import EXIT_STATUS, interrupt_guard
from agentforge.schema.compose import recipe_file_override, register_recipes

EXIT_CONFIG_ERROR = 2  # a config that cannot work (every problem listed); 1: any other agentforge error

USAGE = """usage: agentforge <command> [key=value ...] [--multirun] [-v]

  -v, --verbose  also show other software's output (vLLM, DeepSpeed, Ray, transformers) on the console; it is
                 always in <run dir>/console.log

commands:
  train        RL training: rollout -> advantages -> DeepSpeed update -> weight sync, with eval and checkpoints
  sft          supervised warm start on expert trajectories (writes <run dir>/model for model.init_from)
  rft          rejection fine-tuning: roll out the policy, keep its best trajectories, one SFT epoch (T2PO's
               cold start; writes <run dir>/model)
  rollout      play a policy on N tasks x G and write trajectories and a summary
  eval         evaluate a checkpoint: success, reward, length, trajectory diversity (D^pair, D^dpp) per
               descriptor, decoding baselines (eval.baselines=[pp,rp]), ALFWorld interventions
  sweep-report gather the jobs of a `--multirun` sweep into one table and plot (λ vs diversity vs success)
  view         write a run's trajectories as one static HTML page (filters, Sokoban/ALFWorld/WebShop drawings)
  launch slurm submit a training run as a Slurm job: a Ray cluster over its nodes, the trainer as its driver,
               requeued and resumed before the time limit (`agentforge launch help`; --dry-run prints the script)
  config       every config key with its type, default and help (agentforge config [group [option]])
  envs list    list the registered environments
  envs check   build each env (or the ones named) and play one random episode
  export       a run's checkpoint as a self-contained Hugging Face folder: LoRA merged (or adapter_only=true),
               tokenizer, chat template, generation config, model card; push_to_hub=<repo> (export --help)
  serve        the OpenAI-compatible API (chat completions with tools, /v1/models) on a checkpoint or an
               exported folder, loopback + bearer token (serve --help)

examples:
  agentforge train recipe=gigpo_sokoban
  agentforge train recipe=gigpo_sokoban resume=true
  agentforge train recipe=debug --multirun algorithm=grpo,gigpo
  agentforge rollout recipe=grpo_sokoban
  agentforge rollout recipe=debug engine=hf rollout.num_tasks=4
  agentforge rollout recipe=grpo_sokoban --cfg job      (print the composed config)
  agentforge train recipe=tjpo_alfworld --multirun algorithm.lambda=0,0.1,0.3,0.5
  agentforge train recipe=t2po_sokoban --multirun algorithm.alpha=0.2,0.4,0.6,0.8
  agentforge rft recipe=t2po_webshop model.init_from=runs/sft/<time>/model
  agentforge sweep-report multirun/train/<time>
  agentforge view runs/train/<time>                 (writes runs/train/<time>/trajectories.html)
  agentforge launch slurm recipe=tjpo_alfworld nodes=2 cpus_per_node=16 time=12:00:00 --dry-run
  agentforge eval recipe=tjpo_alfworld checkpoint=runs/train/<time> eval.baselines=[pp,rp]
  agentforge eval recipe=sokoban_demo checkpoint=runs/train/<time> split=test   (the claim's held-out tasks)
  agentforge eval recipe=tjpo_sokoban checkpoint=null eval.num_tasks=16     (the model as shipped)
  agentforge export runs/train/<time> dtype=bf16    (writes runs/train/<time>/export/iter_<N>)
  agentforge serve runs/train/<time>/export/iter_<N> port=8000
  agentforge envs check sokoban search_qa
"""


def _run_rollout(cfg: DictConfig) -> None:
    from agentforge.commands.rollout import run_rollout

    run_rollout(cfg)


def _run_train(cfg: DictConfig) -> None:
    from agentforge.commands.train import build_trainer

    build_trainer(cfg, checked=True).fit()


def _run_eval(cfg: DictConfig) -> None:
    from agentforge.commands.evaluate import run_eval

    run_eval(cfg)


def _run_rft(cfg: DictConfig) -> None:
    from agentforge.commands.rft import run_rft

    run_rft(cfg, checked=True)


def _run_sft(cfg: DictConfig) -> None:
    from agentforge.commands.sft import run_sft

    run_sft(cfg)


HYDRA_COMMANDS: dict[str, Callable[[DictConfig], None]] = {
    "train": _run_train, "rollout": _run_rollout, "sft": _run_sft, "rft": _run_rft, "eval": _run_eval,
}
PLAIN_COMMANDS = ("envs", "sweep-report", "view", "launch", "config", "export", "serve")


@hydra.main(config_path="pkg://agentforge.conf", config_name="config", version_base=None)
def hydra_app(cfg: DictConfig) -> None:
    from agentforge.commands.config_check import check_config
    from agentforge.tracking.capture import output_to_log
    from agentforge.tracking.progress import console

    try:
        check_config(cfg)  # every problem of the config at once, before anything is printed, imported or started
        # other software's output (vLLM, DeepSpeed's compiler, weight-loading bars, Ray) goes to <run dir>/console.log;
        # the console shows agentforge's own lines (`-v` / logger.verbose=true: both)
        with output_to_log(str(cfg.run_dir), bool(cfg.logger.get("verbose", False)), console):
            announce_dtypes(cfg)
            from agentforge.commands.preflight import preflight

            # the env and its data: seconds, not the ~70 s it takes to start the model, the engine and Ray and then
            # fail; the commands below do not check again (their API entries, build_trainer and run_rft, do)
            preflight(cfg, config_checked=True)
            with interrupt_guard():  # Ctrl-C: say so at once, abandon the step, close everything; twice: stop now
                HYDRA_COMMANDS[cfg.command](cfg)
    except AgentforgeError as error:  # a clean message, not Hydra's stack trace: the message names the fix
        mark_failed(cfg, error)
        kind = "config error" if isinstance(error, ConfigError) else "error"
        print(f"agentforge: {kind}: {error}", file=sys.stderr)
        if in_multirun():
            raise  # an Exception (not SystemExit) lets Hydra run the sweep's other jobs, then fail
        raise SystemExit(EXIT_CONFIG_ERROR if isinstance(error, ConfigError) else 1) from None
    except Exception as error:
        mark_failed(cfg, error)
        raise


def announce_dtypes(cfg: DictConfig) -> None:
    """Resolve `auto` dtypes for this machine before the command reads them (its config.yaml then records them),
    and say what was chosen and why in one line; bf16 forced onto hardware that only emulates it is warned about."""
    from agentforge.tracking.capture import terminal_err, terminal_out

    choice = resolve_config_dtypes(cfg)
    print(choice.line, file=terminal_out(), flush=True)
    for warning in choice.warnings:
        print(f"agentforge: warning: {warning}", file=terminal_err(), flush=True)


def in_multirun() -> bool:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def mark_failed(cfg: DictConfig, error: BaseException) -> None:
    """Leave `FAILED` (the error's first line) in the run dir, so `agentforge sweep-report` tells a failed job from
    a running one."""
    from pathlib import Path

    from agentforge.evaluation.sweep_jobs import FAILED_MARKER

    with contextlib.suppress(Exception):  # best effort: never hide the real error
        run_dir = Path(str(cfg.run_dir))
        if run_dir.is_dir():
            (run_dir / FAILED_MARKER).write_text(f"{type(error).__name__}: {error}\n")


_VALUE_FLAGS = {"--cfg", "-c", "--package", "-p", "--config-path", "-cp", "--config-name", "-cn", "--config-dir",
                "-cd", "--experimental-rerun", "--info", "-i"}


def split_hydra_args(args: list[str]) -> tuple[list[str], list[str]]:
    """Hydra's flags (with their values) apart from `key=value` overrides, so `--multirun` may stand anywhere."""
    flags: list[str] = []
    overrides: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg.startswith("-"):  # Hydra overrides never start with "-" (they may with ~ or +)
            flags.append(arg)
            takes_value = arg in _VALUE_FLAGS and i + 1 < len(args)
            if takes_value and "=" not in args[i + 1] and not args[i + 1].startswith("-"):
                flags.append(args[i + 1])
                i += 1
        else:
            overrides.append(arg)
        i += 1
    return flags, overrides


PRELOAD_ENV = "AGENTFORGE_PRELOAD"  # 0: keep the C library's malloc


def preload_tcmalloc(args: list[str]) -> None:
    """Restart this command once with tcmalloc preloaded (what vLLM's CPU guide asks for), when it is installed.

    Measured (docs/benchmarks.md): glibc's malloc keeps the memory of every freed micro-batch, so a learner step's
    peak RSS was 1.6x its live tensors; tcmalloc reuses it (same speed). A preload only works from the process's
    start, hence the re-exec (same pid, before anything is imported). `AGENTFORGE_PRELOAD=0` turns it off.
    """
    import ctypes.util

    if os.environ.get(PRELOAD_ENV, "1") == "0" or "tcmalloc" in os.environ.get("LD_PRELOAD", ""):
        return
    library = ctypes.util.find_library("tcmalloc_minimal") or ctypes.util.find_library("tcmalloc")
    if library is None:
        return
    preload = ":".join(p for p in (library, os.environ.get("LD_PRELOAD", "")) if p)
    env = {**os.environ, "LD_PRELOAD": preload, PRELOAD_ENV: "0"}
    # -P: never the working directory first on sys.path (a stray agentforge/ there must not run in its place)
    os.execve(sys.executable, [sys.executable, "-P", "-m", "agentforge.cli", *args], env)


SHORTHANDS = {"eval": {"split": "eval.split"}}  # `agentforge eval split=test` = `eval.split=test`


def command_shorthands(command: str, overrides: list[str]) -> list[str]:
    """A command's short keys spelled in full (`agentforge eval split=test` -> `eval.split=test`)."""
    short = SHORTHANDS.get(command, {})
    out = []
    for override in overrides:
        key, sep, value = override.partition("=")
        out.append(f"{short[key]}={value}" if sep and key in short else override)
    return out


def main(argv: list[str] | None = None) -> int:
    # vLLM's CPU engine drops to one thread unless OMP_NUM_THREADS is set before torch starts: use every core.
    os.environ.setdefault("OMP_NUM_THREADS", str(len(os.sched_getaffinity(0))))
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")  # keep the console for progress bars; override to debug
    args = list(sys.argv[1:] if argv is None else argv)
    if argv is None and args and args[0] in HYDRA_COMMANDS:
        preload_tcmalloc(args)
    if not args or args[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0
    command, rest = args[0], args[1:]
    try:
        if command == "envs":
            from agentforge.commands.envs import envs_command

            return envs_command(rest)
        if command == "sweep-report":
            from agentforge.evaluation.sweep_report import sweep_report_command

            return sweep_report_command(rest)
        if command == "view":
            from agentforge.commands.view import view_command

            return view_command(rest)
        if command == "launch":
            from agentforge.commands.launch import launch_command

            return launch_command(rest)
        if command == "config":
            from agentforge.commands.config_docs import config_command

            if any(a in ("-h", "--help") for a in rest):  # the group list is its help
                print("usage: agentforge config [group [option]] [--markdown] | --sync-docs")
                rest = [a for a in rest if a not in ("-h", "--help")][:0]
            return config_command(rest)
        if command == "export":
            from agentforge.commands.export import export_command

            return export_command(rest)
        if command == "serve":
            from agentforge.commands.serve import serve_command

            return serve_command(rest)
        if command not in HYDRA_COMMANDS:
            valid = ", ".join([*HYDRA_COMMANDS, *PLAIN_COMMANDS])
            print(f"agentforge: unknown command {command!r}; valid commands: {valid}\n\n{USAGE}", file=sys.stderr)
            return 2
        verbose = [a for a in rest if a in ("-v", "--verbose")]
        rest = [a for a in rest if a not in verbose] + (["logger.verbose=true"] if verbose else [])
        flags, overrides = split_hydra_args(rest)
        contradicting = [o for o in overrides if o.lstrip("+~").startswith("command=") and o != f"command={command}"]
        if contradicting:
            raise ConfigError(f"`{contradicting[0]}` contradicts the command `agentforge {command}`: the command "
                              "word sets it; drop the override")
        overrides = command_shorthands(command, overrides)
        overrides, recipe_files = recipe_file_override(overrides)
        register_recipes(recipe_files)
        if not any(f in ("--help", "-h", "--hydra-help", "--info", "-i") for f in flags):
            from agentforge.commands.overrides import override_problems
            from agentforge.errors import ConfigProblems

            problems, _ = override_problems([f"command={command}", *overrides])
            if problems:  # every mistake at once, before Hydra stops at the first or anything starts
                raise ConfigProblems(problems)
        sys.argv = [f"agentforge {command}", *flags, f"command={command}", *overrides]
        hydra_app()
    except ConfigError as error:
        print(f"agentforge: config error: {error}", file=sys.stderr)
        return EXIT_CONFIG_ERROR
    except AgentforgeError as error:
        print(f"agentforge: error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as stop:  # Ctrl-C: 130; a scheduler's SIGUSR1/SIGTERM after its checkpoint: 128 + signal
        print(f"agentforge: stopped{f' ({stop})' if str(stop) else ''}", file=sys.stderr)
        return int(getattr(stop, "status", EXIT_STATUS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
