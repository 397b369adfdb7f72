"""What this machine computes natively, and the dtype `auto` picks from it.

bf16 halves memory and, where the hardware has bf16 instructions, roughly doubles matmul speed; where it has not,
torch emulates it and a bf16 matmul runs tens of times slower than fp32 (docs/dtype.md has the measurements). So
`dtype: auto` (the default) means bf16 only where it is native: a CPU with AMX or AVX512-BF16, or a GPU whose torch
build reports bf16 support; fp32 everywhere else, and never fp16 on a CPU.

Two ways to pretend to be another machine, both read here:
- `AGENTFORGE_NATIVE_BF16=0|1` overrides the answer (tests, or a user who measured otherwise);
- `ONEDNN_MAX_CPU_ISA` below AVX512_CORE_BF16 (e.g. `AVX2`) or `ATEN_CPU_CAPABILITY=avx2|default` make torch
  compute like an AVX2 machine (benchmarks/dtype_matmul.py), so `auto` treats them as "no native bf16" too.

`resolve_config_dtypes` is applied once to every composed config (agentforge.schema.compose.compose_config and the CLI):
it replaces `auto` (and the engine's / learner's `null`, "the model's") with the concrete dtype and adds a
`hardware` block (`describe()`), so the run dir's config.yaml records what ran and on what, and returns the one line
the CLI prints plus any warnings.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from agentforge.errors import ConfigError

NATIVE_BF16_ENV = "AGENTFORGE_NATIVE_BF16"
AUTO = "auto"
DTYPES = ("float32", "bfloat16", "float16")
ALIASES = {"fp32": "float32", "float": "float32", "bf16": "bfloat16", "fp16": "float16", "half": "float16"}
# oneDNN ISA caps without bf16 compute (ONEDNN_MAX_CPU_ISA; oneDNN's names, case-insensitive).
NO_BF16_ONEDNN_ISAS = frozenset({"sse41", "avx", "avx2", "avx2_vnni", "avx2_vnni_2", "avx512_core",
                                 "avx512_core_vnni"})
NO_BF16_ATEN_CAPABILITIES = frozenset({"default", "avx2"})
EMULATION_VARS = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS", NATIVE_BF16_ENV)
# Quoted by the forced-bf16 warning; benchmarks/dtype_matmul.py (1 thread) and issue 16, docs/dtype.md.
BF16_SLOWDOWN = ("measured on an AMD EPYC limited to AVX2 with ONEDNN_MAX_CPU_ISA=AVX2: a 1024^3 bf16 matmul at 0.9 "
                 "vs 95 GFLOP/s in fp32, ~100x slower; a linear layer's input gradient ~37x, its forward ~5x; on a "
                 "real AVX2-only EPYC: 1.1 vs 44 GFLOP/s, 40x")


# ------------------------------------------------------------------------------------------------- the CPU


@cache
def _cpuinfo() -> dict[str, str]:
    """The first processor block of /proc/cpuinfo (empty where there is none, e.g. macOS)."""
    path = Path("/proc/cpuinfo")
    if not path.is_file():
        return {}
    info: dict[str, str] = {}
    for line in path.read_text(errors="replace").splitlines():
        if not line.strip():
            if info:
                break
            continue
        key, _, value = line.partition(":")
        info.setdefault(key.strip(), value.strip())
    return info


def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags as the kernel reports them (x86 `flags`, ARM `Features`)."""
    info = _cpuinfo()
    if info:
        return frozenset((info.get("flags") or info.get("Features") or "").split())
    import torch  # no /proc/cpuinfo: ask torch's cpuinfo instead

    found = {"avx2": torch.cpu._is_avx2_supported(), "avx512f": torch.cpu._is_avx512_supported(),
             "avx512_bf16": torch.cpu._is_avx512_bf16_supported(), "amx_bf16": torch.cpu._is_amx_tile_supported()}
    return frozenset(name for name, present in found.items() if present)


def cpu_model() -> str:
    info = _cpuinfo()
    return info.get("model name") or info.get("Model") or platform.processor() or platform.machine()


def cpu_kind(flags: frozenset[str] | None = None) -> str:
    """The label docs/benchmarks.md files figures under: the best bf16-relevant instruction set present, or the
    one an ISA-capping variable emulates (`AVX2 (emulated on AVX512-BF16)`)."""
    flags = cpu_flags() if flags is None else flags
    if "amx_bf16" in flags:
        kind = "AMX"
    elif "avx512_bf16" in flags:
        kind = "AVX512-BF16"
    elif "avx512f" in flags:
        kind = "AVX-512 (no BF16)"
    elif "avx2" in flags:
        kind = "AVX2"
    else:
        kind = platform.machine() or "unknown"
    emulated = _emulation()
    return f"{emulated[0]} (emulated on {kind})" if emulated and kind in ("AMX", "AVX512-BF16") else kind


def _emulation() -> tuple[str, str] | None:
    """(the CPU kind emulated, why) when an ISA-capping variable keeps torch below bf16 compute, else None."""
    onednn = os.environ.get("ONEDNN_MAX_CPU_ISA", "").strip()
    if onednn.lower() in NO_BF16_ONEDNN_ISAS:
        kind = "AVX-512 (no BF16)" if onednn.lower().startswith("avx512") else "AVX2"
        return kind, f"ONEDNN_MAX_CPU_ISA={onednn} caps oneDNN below bf16"
    aten = os.environ.get("ATEN_CPU_CAPABILITY", "").strip()
    if aten.lower() in NO_BF16_ATEN_CAPABILITIES:
        return "AVX2", f"ATEN_CPU_CAPABILITY={aten} caps torch's kernels below AVX-512"
    return None


def emulated_isa() -> str | None:
    """Why torch computes below the hardware's instruction set, if an ISA-capping variable says so."""
    emulated = _emulation()
    return emulated[1] if emulated else None


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


# --------------------------------------------------------------------------------------------- resolution


def _env_override() -> bool | None:
    value = os.environ.get(NATIVE_BF16_ENV, "").strip().lower()
    if not value:
        return None
    if value in ("1", "true", "yes"):
        return True
    if value in ("0", "false", "no"):
        return False
    raise ConfigError(f"{NATIVE_BF16_ENV}={value!r} is not understood; set it to 1 (pretend bf16 is native), "
                      "0 (pretend it is not) or unset it")


def native_bf16(device: str | None = None) -> tuple[bool, str]:
    """Whether `device` ("cpu" or "cuda"; default: cuda when torch sees a GPU) computes bf16 natively, and why."""
    override = _env_override()
    if override is not None:
        return override, f"{NATIVE_BF16_ENV}={os.environ[NATIVE_BF16_ENV].strip()}"
    device = device or ("cuda" if cuda_available() else "cpu")
    if device.startswith("cuda"):
        import torch

        name = torch.cuda.get_device_name()
        if torch.cuda.is_bf16_supported(including_emulation=False):
            return True, f"GPU {name} has bf16"
        return False, f"GPU {name} lacks bf16"
    emulated = emulated_isa()
    if emulated:
        return False, emulated
    flags = cpu_flags()
    if "amx_bf16" in flags:
        return True, "CPU has AMX"
    if "avx512_bf16" in flags:
        return True, "CPU has AVX512-BF16"
    arch = platform.machine()
    if arch in ("x86_64", "AMD64", "i686"):
        best = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "neither AVX2 nor AVX-512"
        return False, f"CPU has {best} but neither AMX nor AVX512-BF16"
    return False, f"{arch} CPU: bf16 speed not measured here; set the dtype explicitly to try bf16"


def canonical_dtype(value: Any, key: str = "dtype") -> str:
    """A dtype name as torch spells it (`bf16` -> `bfloat16`), `auto`, or a ConfigError listing the valid ones."""
    name = str(value).strip().lower() if value is not None else AUTO
    name = ALIASES.get(name, name)
    if name != AUTO and name not in DTYPES:
        raise ConfigError(f"{key}={value!r} is not a dtype; use auto (bf16 where the hardware computes it natively, "
                          f"else float32) or one of {', '.join(DTYPES)}")
    return name


def resolve_dtype(requested: Any, device: str | None = None, key: str = "dtype") -> tuple[str, str]:
    """(dtype, reason): `auto` (or None) becomes bf16 where native, else float32; an explicit dtype wins, except
    float16 on a CPU, which is refused (slow or missing kernels, and the learner cannot train in it)."""
    name = canonical_dtype(requested, key)
    device = device or ("cuda" if cuda_available() else "cpu")
    if name == AUTO:
        native, why = native_bf16(device)
        return ("bfloat16" if native else "float32"), why
    if name == "float16" and not device.startswith("cuda"):
        raise ConfigError(f"{key}=float16 is not supported on a CPU (no fast fp16 kernels, and the learner trains in "
                          f"float32 or bfloat16 only); set {key}=auto (bfloat16 where the CPU has AMX or "
                          "AVX512-BF16, else float32) or float32")
    return name, "set explicitly"


def slow_bf16_warning(keys: list[str], device: str | None = None) -> str | None:
    """The warning for bf16 set by hand (`keys`, e.g. ["model.dtype"]) on hardware that only emulates it; None
    when bf16 is native there."""
    native, why = native_bf16(device)
    if native or not keys:
        return None
    named = " and ".join(keys)
    return (f"{named}=bfloat16 on hardware without native bf16 ({why}): expect training and generation to run many "
            f"times slower than in float32 ({BF16_SLOWDOWN}); set {named.replace(' and ', '/')} to auto or float32 "
            "unless bf16 is what you are testing")


# ------------------------------------------------------------------------------------------ composed configs


class SlowDtypeWarning(UserWarning):
    """bf16 set by hand on hardware that only emulates it (`compose_config` warns with it; the CLI prints it)."""


@dataclass
class DtypeChoice:
    """The dtypes a composed config resolved to, why, and the warnings to show."""

    chosen: dict[str, str] = field(default_factory=dict)  # "model" | "engine" | "learner" -> dtype
    how: dict[str, str] = field(default_factory=dict)  # -> "auto", "set" or "the model's"
    auto: tuple[str, str] = ("float32", "")  # what `auto` picks on this machine, and why
    warnings: list[str] = field(default_factory=list)

    @property
    def line(self) -> str:
        """One line for the console: `dtype auto → bfloat16 (CPU has AVX512-BF16): model bfloat16, engine ...`, or
        `dtype model float32 (set), ...; auto would pick bfloat16 (CPU has AVX512-BF16)` when nothing is auto."""
        parts = ", ".join(f"{group} {dtype}" + ("" if self.how[group] == AUTO else f" ({self.how[group]})")
                          for group, dtype in self.chosen.items())
        if AUTO in self.how.values():
            return f"dtype auto → {self.auto[0]} ({self.auto[1]}): {parts}"
        return f"dtype {parts}; auto would pick {self.auto[0]} ({self.auto[1]})"


def _engine_device(engine: Mapping[str, Any]) -> str | None:
    device = str(engine.get("device") or "")
    return device if device.startswith(("cpu", "cuda")) else None


def resolve_config_dtypes(cfg: Any) -> DtypeChoice:
    """Replace `auto` in model.dtype / engine.dtype / learner.dtype with the concrete dtype, and the engine's or
    learner's `null` with the model's, in place, and record the machine and the choice in `cfg.hardware`.
    Idempotent: a second call reports the first call's choice, and an engine / learner that followed the model
    follows a model.dtype changed in between. Returns the choice and the warnings to show."""
    from omegaconf import open_dict

    previous = cfg.get("hardware") or {}
    earlier = dict(previous.get("dtypes") or {})  # group -> [dtype, how] from an earlier call
    choice = DtypeChoice(auto=resolve_dtype(AUTO))
    for group in ("model", "engine", "learner"):
        node = cfg.get(group)
        if node is None:
            continue
        raw = node.get("dtype")
        follows_model = raw is None or (group in earlier and raw == earlier[group][0]
                                        and earlier[group][1] == "the model's")
        if follows_model and "model" in choice.chosen:
            dtype, how = choice.chosen["model"], "the model's"
        elif group in earlier and raw == earlier[group][0]:
            dtype, how = earlier[group]
        else:
            requested = canonical_dtype(raw, f"{group}.dtype")
            device = _engine_device(node) if group == "engine" else None
            dtype, _ = resolve_dtype(requested, device, key=f"{group}.dtype")
            how = AUTO if requested == AUTO else "set"
        choice.chosen[group], choice.how[group] = dtype, how
        with open_dict(cfg):
            node.dtype = dtype
    record = {k: v for k, v in describe().items() if k not in ("dtype", "torch_threads")}
    record["dtypes"] = {group: [dtype, choice.how[group]] for group, dtype in choice.chosen.items()}
    with open_dict(cfg):  # the run's config.yaml then says on which machine, and how, these dtypes were chosen
        cfg.hardware = record
    forced = [f"{group}.dtype" for group, dtype in choice.chosen.items()
              if dtype == "bfloat16" and choice.how[group] == "set"]
    warning = slow_bf16_warning(forced)
    if warning:
        choice.warnings.append(warning)
    return choice


# --------------------------------------------------------------------------------------------- the record


def describe(dtype: str | None = None) -> dict[str, Any]:
    """The hardware facts a benchmark result needs to be comparable: CPU model and kind, torch's CPU capability,
    AMX / AVX512-BF16, cores, the GPU if any, what `auto` picks, any emulation variables, and the dtype used."""
    import torch

    flags = cpu_flags()
    native, why = native_bf16()
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else None
    return {
        "cpu_model": cpu_model(),
        "cpu_kind": cpu_kind(flags),
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "amx": "amx_bf16" in flags,
        "avx512_bf16": "avx512_bf16" in flags,
        "avx512": "avx512f" in flags,
        "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "gpu": gpu,
        "native_bf16": native,
        "native_bf16_reason": why,
        "emulation": {name: os.environ[name] for name in EMULATION_VARS if os.environ.get(name)},
        "torch": str(torch.__version__),
        "dtype": dtype,
    }
