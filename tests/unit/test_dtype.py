"""`dtype: auto`: bf16 only where the hardware computes it natively, fp32 elsewhere, never fp16 on a CPU; explicit
dtypes win (with a warning for bf16 on hardware that only emulates it); every shipped recipe follows the rule."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from agentforge.errors import ConfigError
from agentforge.hardware import (
    NATIVE_BF16_ENV,
    SlowDtypeWarning,
    cpu_flags,
    describe,
    native_bf16,
    resolve_config_dtypes,
    resolve_dtype,
)
from agentforge.schema.compose import available_recipes, bundled_recipe_dir, compose_config

pytestmark = pytest.mark.unit

GROUPS = ("model", "engine", "learner")
SHIPPED = sorted(path.stem for path in bundled_recipe_dir().glob("*.yaml"))


@pytest.fixture(autouse=True)
def real_hardware(monkeypatch: pytest.MonkeyPatch) -> None:
    """Start every test from the machine as it is: no pretend or ISA-capping variable from the caller's shell."""
    for name in (NATIVE_BF16_ENV, "ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def no_bf16(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(NATIVE_BF16_ENV, "0")


@pytest.fixture
def has_bf16(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(NATIVE_BF16_ENV, "1")


def dtypes(cfg) -> tuple[str, str, str]:
    return tuple(str(cfg[group].dtype) for group in GROUPS)


# ------------------------------------------------------------------------------------------- shipped recipes


def test_the_shipped_recipes_are_all_checked():
    assert len(SHIPPED) >= 10 and set(SHIPPED) <= set(available_recipes())


@pytest.mark.parametrize("recipe", SHIPPED)
def test_no_shipped_recipe_resolves_to_bf16_without_native_bf16(recipe, no_bf16):
    """The issue's failure: a recipe that trains in bf16 on an AVX2 laptop crawls (~40x slower matmuls)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", SlowDtypeWarning)  # no recipe forces bf16 by hand either
        cfg = compose_config([f"recipe={recipe}"])
    assert dtypes(cfg) == ("float32", "float32", "float32")


@pytest.mark.parametrize("recipe", SHIPPED)
def test_shipped_recipes_follow_auto_on_native_bf16(recipe, has_bf16):
    """...and they do use bf16 where it is native (except the tiny test model, fixed at fp32 on purpose)."""
    cfg = compose_config([f"recipe={recipe}"])
    expected = "float32" if cfg.model.name == "tiny" else "bfloat16"
    assert dtypes(cfg) == (expected, expected, expected)


def test_the_default_config_follows_auto(no_bf16, monkeypatch):
    assert dtypes(compose_config([])) == ("float32", "float32", "float32")
    monkeypatch.setenv(NATIVE_BF16_ENV, "1")
    assert dtypes(compose_config([])) == ("bfloat16", "bfloat16", "bfloat16")


def test_an_avx2_emulation_counts_as_no_native_bf16(monkeypatch):
    """ONEDNN_MAX_CPU_ISA=AVX2 makes torch's bf16 matmuls ~100x slower (benchmarks/dtype_matmul.py): auto must
    then choose fp32 whatever the CPU's flags say; so must ATEN_CPU_CAPABILITY=avx2."""
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    native, why = native_bf16("cpu")
    assert not native and "ONEDNN_MAX_CPU_ISA=AVX2" in why
    assert dtypes(compose_config(["recipe=gigpo_sokoban"])) == ("float32", "float32", "float32")
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA")
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    native, why = native_bf16("cpu")
    assert not native and "ATEN_CPU_CAPABILITY=avx2" in why
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx512")
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_AMX")  # caps that keep bf16 leave the hardware's answer
    assert native_bf16("cpu")[0] == bool({"amx_bf16", "avx512_bf16"} & cpu_flags())


def test_this_cpu_is_read_from_its_flags():
    native, why = native_bf16("cpu")
    flags = cpu_flags()
    assert native == bool({"amx_bf16", "avx512_bf16"} & flags), why
    if "amx_bf16" in flags:
        assert why == "CPU has AMX"
    elif "avx512_bf16" in flags:
        assert why == "CPU has AVX512-BF16"


# ------------------------------------------------------------------------------------------ resolution rules


def test_auto_is_bf16_only_where_native(monkeypatch):
    monkeypatch.setenv(NATIVE_BF16_ENV, "1")
    assert resolve_dtype("auto", "cpu") == ("bfloat16", f"{NATIVE_BF16_ENV}=1")
    assert resolve_dtype(None, "cpu")[0] == "bfloat16"
    monkeypatch.setenv(NATIVE_BF16_ENV, "0")
    assert resolve_dtype("auto", "cpu") == ("float32", f"{NATIVE_BF16_ENV}=0")


@pytest.mark.parametrize("native", ["0", "1"])
def test_an_explicit_dtype_wins(native, monkeypatch):
    monkeypatch.setenv(NATIVE_BF16_ENV, native)
    assert resolve_dtype("float32", "cpu") == ("float32", "set explicitly")
    assert resolve_dtype("bfloat16", "cpu") == ("bfloat16", "set explicitly")
    assert resolve_dtype("bf16", "cpu")[0] == "bfloat16" and resolve_dtype("fp32", "cpu")[0] == "float32"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cfg = compose_config(["recipe=gigpo_sokoban", "model.dtype=float32", "learner.dtype=bfloat16"])
    assert dtypes(cfg) == ("float32", "float32", "bfloat16")  # the engine follows the model unless set itself
    slow = [w for w in caught if issubclass(w.category, SlowDtypeWarning)]
    assert len(slow) == (native == "0") and (not slow or "learner.dtype=bfloat16" in str(slow[0].message))


def test_fp16_on_a_cpu_is_refused_with_the_fix(no_bf16):
    with pytest.raises(ConfigError, match="model.dtype=float16 is not supported on a CPU") as error:
        compose_config(["model.dtype=float16"])
    assert "model.dtype=auto" in str(error.value) and "float32" in str(error.value)
    with pytest.raises(ConfigError, match="engine.dtype=float16"):
        compose_config(["engine.dtype=half"])
    assert resolve_dtype("float16", "cuda") == ("float16", "set explicitly")  # GPUs do fp16


def test_an_unknown_dtype_names_the_valid_ones():
    with pytest.raises(ConfigError, match="learner.dtype='float8' is not a dtype; use auto .* float32, bfloat16"):
        compose_config(["learner.dtype=float8"])


def test_a_bad_pretend_value_is_an_error(monkeypatch):
    monkeypatch.setenv(NATIVE_BF16_ENV, "maybe")
    with pytest.raises(ConfigError, match=f"{NATIVE_BF16_ENV}='maybe'"):
        native_bf16("cpu")


def test_forced_bf16_without_native_support_warns_with_the_slowdown(no_bf16, capsys):
    from agentforge.cli import announce_dtypes

    with pytest.warns(SlowDtypeWarning, match=r"model.dtype and learner.dtype=bfloat16 on hardware without native"):
        compose_config(["recipe=gigpo_sokoban", "model.dtype=bfloat16", "learner.dtype=bfloat16"])
    # the CLI's path: resolve the Hydra config in place, one line on stdout, the warning on stderr
    cfg = OmegaConf.create({"model": {"dtype": "bfloat16"}, "engine": {"dtype": None}, "learner": {"dtype": "auto"}})
    announce_dtypes(cfg)
    out, err = capsys.readouterr()
    assert out.strip() == ("dtype auto → float32 (AGENTFORGE_NATIVE_BF16=0): model bfloat16 (set), "
                           "engine bfloat16 (the model's), learner float32")
    assert "model.dtype=bfloat16 on hardware without native bf16" in err and "slower than" in err
    assert "GFLOP/s" in err and "auto or float32" in err


def test_no_warning_where_bf16_is_native_or_auto(has_bf16, capsys):
    from agentforge.cli import announce_dtypes

    with warnings.catch_warnings():
        warnings.simplefilter("error", SlowDtypeWarning)
        compose_config(["model.dtype=bfloat16"])
    cfg = OmegaConf.create({"model": {"dtype": "auto"}, "engine": {"dtype": None}, "learner": {"dtype": None}})
    announce_dtypes(cfg)
    out, err = capsys.readouterr()
    assert out.strip() == ("dtype auto → bfloat16 (AGENTFORGE_NATIVE_BF16=1): model bfloat16, "
                           "engine bfloat16 (the model's), learner bfloat16 (the model's)")
    assert err == ""


def test_resolution_is_idempotent_and_null_follows_a_changed_model(has_bf16):
    cfg = compose_config(["recipe=gigpo_sokoban"])
    first = resolve_config_dtypes(cfg).line
    assert resolve_config_dtypes(cfg).line == first  # the record in cfg.hardware keeps "auto" / "the model's"
    cfg.model.dtype = "float32"
    again = resolve_config_dtypes(cfg)
    assert dtypes(cfg) == ("float32", "float32", "float32") and again.how["engine"] == "the model's"


# ------------------------------------------------------------------------------------- the record of the run


def test_the_run_config_records_the_resolved_dtypes_and_the_machine(tmp_path, has_bf16):
    from agentforge.commands.builders import prepare_run_dir

    cfg = compose_config(["recipe=grpo_sokoban"], run_dir=str(tmp_path))
    written = (prepare_run_dir(cfg) / "config.yaml").read_text()
    saved = OmegaConf.load(tmp_path / "config.yaml")
    assert "auto" not in [str(saved[group].dtype) for group in GROUPS] and dtypes(saved)[0] == "bfloat16"
    assert saved.hardware.native_bf16 is True and saved.hardware.native_bf16_reason == f"{NATIVE_BF16_ENV}=1"
    assert list(saved.hardware.dtypes.model) == ["bfloat16", "auto"]
    assert "cpu_model" in written and "torch_cpu_capability" in written


def test_describe_has_what_a_benchmark_result_needs():
    info = describe("float32")
    for key in ("cpu_model", "cpu_kind", "torch_cpu_capability", "amx", "avx512_bf16", "cores", "native_bf16"):
        assert key in info, key
    assert info["dtype"] == "float32" and info["cores"] >= 1 and isinstance(info["torch_cpu_capability"], str)


def test_learner_and_model_entry_points_take_auto(no_bf16):
    from agentforge.learner import LearnerConfig
    from agentforge.models.loading import resolve_model

    assert LearnerConfig(dtype="auto").dtype == "float32"
    with pytest.raises(ConfigError, match="dtype='float16': is not one of float32, bfloat16, auto"):
        LearnerConfig(dtype="float16").validate()
    with pytest.raises(ConfigError, match="float16 is not supported on a CPU"):
        resolve_model({"name": "tiny", "dtype": "float16"})


def test_no_shipped_config_sets_bf16_by_hand():
    """Conf groups and recipes say auto (or a labelled fixed fp32); bf16 by hand is the user's choice only."""
    import agentforge.conf

    conf = Path(agentforge.conf.__file__).parent
    files = [*bundled_recipe_dir().glob("*.yaml"), *conf.rglob("*.yaml")]
    offenders = [str(f) for f in files if any(line.split("#")[0].strip() in ("dtype: bfloat16", "dtype: bf16")
                                              for line in f.read_text().splitlines())]
    assert not offenders
