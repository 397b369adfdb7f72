"""The typed config schema: every problem of a command line at once, in one line each and without a traceback (exit
status 2), typed defaults of every engine/env/algorithm option in the composed config, plugins checked by the same
schema, the README's and docs' tables generated from it, and a fuzz of wrong values over every key."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from omegaconf import open_dict

from agentforge.commands.config_check import check_config, config_problems
from agentforge.commands.config_docs import group_options, group_rows, sync_docs
from agentforge.commands.overrides import override_problems
from agentforge.envs import ENVS
from agentforge.envs.sokoban import SokobanEnv
from agentforge.errors import ConfigError, ConfigProblems
from agentforge.schema.compose import available_recipes, compose_config
from agentforge.schema.options import default_text, options
from agentforge.schema.registry import algorithm_schema, env_schema

pytestmark = pytest.mark.unit
REPO = Path(__file__).resolve().parents[2]


def test_every_recipe_passes_the_schema():
    for name in sorted(available_recipes()):  # train runs every check; the other commands' sections are the same
        assert config_problems(compose_config([f"recipe={name}", "command=train"])) == [], name
    for command in ("rollout", "eval", "sft", "rft"):
        assert config_problems(compose_config(["recipe=gigpo_sokoban", f"command={command}"])) == [], command


def test_all_problems_of_a_command_line_at_once_with_the_nearest_key():
    problems, _ = override_problems(["command=train", "recipe=gigpo_sokoban", "learner.lr=abc", "learner.lrr=1",
                                     "trainer.group_size=0", "agent.sampling.top_p=2", "env.dim_rom=5",
                                     "algorithm.gamma=high", "learner.loss.kl_estimator=k9"])
    text = "\n".join(problems)
    assert len(problems) == 6, text  # the multi-key checks wait for the types to be right
    assert "learner.lr='abc': must be a number (default 1e-05)" in text
    assert "learner.lrr: unknown key; did you mean 'lr'?" in text
    assert "env.dim_rom: unknown key; did you mean 'dim_room'?" in text
    assert "trainer.group_size=0: must be >= 1" in text and "agent.sampling.top_p=2: must be <= 1" in text
    assert "algorithm.gamma='high': must be a number" in text
    problems, _ = override_problems(["command=train", "recipe=gigpo_sokoban", "learner.loss.kl_estimator=k9",
                                     "agent.sampling.top_p=0.9", "trainer.group_size=1"])
    text = "\n".join(problems)  # inconsistent combinations, each its own line
    assert len(problems) == 3 and "kl_estimator='k9' is unknown" in text and "top_p=0.9 (use 1.0)" in text
    assert "gigpo compares rollouts within a group" in text


def test_an_unknown_section_is_named_with_the_section_it_abbreviates():
    """`trainer.async.*` (the section is `trainer.asynchronous`): the missing part is `async`, not the leaf, and
    difflib alone finds nothing for it; a recipe file's `trainer: {async: ...}` gets the same pointer."""
    problems, _ = override_problems(["command=train", "recipe=debug", "trainer.async.max_staleness=1"])
    assert len(problems) == 1 and problems[0].startswith(
        "trainer.async.max_staleness: unknown key (trainer has no 'async'); did you mean 'asynchronous'? "), problems
    cfg = compose_config(["recipe=debug", "command=train"])
    with open_dict(cfg):
        cfg.trainer["async"] = {"max_staleness": 1}
    assert any(p.startswith("trainer.async: unknown key; did you mean 'asynchronous'?") for p in config_problems(cfg))


def test_composing_a_config_leaves_no_folder_behind(tmp_path, monkeypatch):
    """compose_config() names a fresh run folder without creating it: whatever writes the run creates it."""
    import tempfile

    from agentforge.commands.builders import prepare_run_dir

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    first, second = compose_config(["recipe=debug"]), compose_config(["recipe=debug"])
    assert list(tmp_path.iterdir()) == []
    assert first.run_dir != second.run_dir and Path(first.run_dir).parent == tmp_path
    assert Path(first.run_dir).name.startswith("agentforge-")
    assert prepare_run_dir(first).is_dir() and (Path(first.run_dir) / "config.yaml").exists()


def test_keys_whose_defaults_interpolate_hydra_can_be_overridden(tmp_path):
    # run_dir's default is ${hydra:...}: checking that the key exists must not resolve it (no HydraConfig here)
    problems, cfg = override_problems(["command=train", "recipe=debug", f"run_dir={tmp_path / 'run'}", "seed=3"])
    assert problems == [] and cfg is not None and cfg.run_dir == str(tmp_path / "run")


def test_the_cli_says_every_problem_without_a_traceback_and_exits_2(tmp_path):
    out = subprocess.run([sys.executable, "-m", "agentforge.cli", "train", "recipe=gigpo_sokoban", "learner.lr=abc",
                          "learner.lrr=1"], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                         env={"AGENTFORGE_PRELOAD": "0", "PATH": "/usr/bin:/bin"})
    assert out.returncode == 2, out.stderr
    assert "2 config problems (nothing was started)" in out.stderr and "Traceback" not in out.stderr
    assert "dtype" not in out.stdout  # nothing else was printed first
    assert not (tmp_path / "runs").exists()


def test_a_plugin_algorithm_by_dotted_path_is_checked_by_its_config_class():
    cfg = compose_config(["command=train", "algorithm.name=agentforge.algorithms.grpo:GRPO"])
    assert config_problems(cfg) == []
    with pytest.raises(ConfigProblems, match="algorithm.norm_by_std='yes': must be true or false"):
        check_config(compose_config(["command=train", "algorithm.name=agentforge.algorithms.grpo:GRPO",
                                     "algorithm.norm_by_std=yes"]))
    problems, _ = override_problems(["command=train", "algorithm.name=nopkg.nomod:Thing"])
    assert problems and "algorithm.name='nopkg.nomod:Thing': cannot load it" in problems[0]


def test_the_composed_config_holds_every_option_with_its_default():
    cfg = compose_config(["recipe=gigpo_sokoban"])
    assert cfg.env.p_change_directions == 0.35  # in the env's constructor, not in conf/env/sokoban.yaml
    assert cfg.engine.enable_sleep_mode is False
    for name in group_options("algorithm"):
        composed = compose_config([f"algorithm={name}"]).algorithm
        assert set(composed) == set(options(algorithm_schema(name))), name
    for name in ("sokoban", "webshop", "search_qa"):
        assert set(compose_config([f"env={name}"]).env) == set(options(env_schema(name))), name


DELIBERATE = {  # composed default vs schema default, and why they differ
    "command": "the command word sets it", "run_dir": "Hydra's output dir",
    "model.dtype": "resolved for this machine at composition", "learner.dtype": "resolved (null: the model's)",
}


def test_the_yaml_values_are_the_schemas_defaults():
    from omegaconf import OmegaConf

    cfg = OmegaConf.to_container(compose_config(["command=train"]), resolve=False)
    for group in ("top", "model", "agent", "learner", "trainer", "sft", "rft", "rollout", "eval", "env_pool",
                  "logger"):
        for row in group_rows(group):
            node = cfg
            for part in row.key.split("."):
                node = node.get(part, "<missing>") if isinstance(node, dict) else "<missing>"
            if node == "<missing>" or row.key in DELIBERATE:
                continue  # optional keys (tiny's model.num_layers, logger.run_id ...) need not be written
            assert default_text(node) == row.default, row.key


class DocsPluginEnv(SokobanEnv):
    """A plugin env registered in this process, as other tests' envs are: the generated docs leave it out."""


def test_the_readme_tables_and_the_reference_are_generated_from_the_schema():
    if "docs_plugin_env_test" not in ENVS.names():
        ENVS.register("docs_plugin_env_test")(DocsPluginEnv)
    assert "docs_plugin_env_test" in group_options("env")
    assert "docs_plugin_env_test" not in group_options("env", builtin_only=True)
    assert sync_docs(str(REPO), write=False) == [], "run `agentforge config --sync-docs` and commit the result"


# ---------------------------------------------------------------------------------------------------- fuzz

def bad_values(row) -> list[object]:
    """Values of the wrong type, and out of range where the key has bounds or choices."""
    kind = row.type
    values: list[object] = []
    if kind in ("int", "int | null"):
        values += ["abc", 1.5, "[1,2]"]
    if kind in ("float", "float | null"):
        values += ["abc", "true", "[1]"]
    if kind in ("bool", "bool | null"):
        values += ["maybe", 3]
    if kind.startswith("list"):
        values += [7]
    if "(" in row.help and row.help.endswith(")") and " | " in row.help.rsplit("(", 1)[1]:
        values += ["zz_not_a_choice"]
    return values


def all_rows():
    rows = []
    for group in ("model", "agent", "learner", "trainer", "sft", "rft", "rollout", "eval", "env_pool", "logger"):
        rows += group_rows(group)
    for group, option in (("engine", "vllm"), ("env", "sokoban"), ("algorithm", "gigpo")):
        rows += [r for r in group_rows(group, option) if not r.key.endswith(".name")]
    return [r for r in rows if bad_values(r)]


ROWS = all_rows()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(ROWS), st.data())
def test_fuzz_every_wrong_value_gives_a_clean_config_error(row, data):
    value = data.draw(st.sampled_from(bad_values(row)))
    key = row.key.replace("engine[vllm]", "engine").replace("env[sokoban]", "env").replace("algorithm[gigpo]",
                                                                                         "algorithm")
    problems, _ = override_problems(["command=train", "recipe=gigpo_sokoban", f"{key}={value}"])
    assert problems, (key, value)
    assert all(isinstance(p, str) and "Traceback" not in p for p in problems)


def test_out_of_range_numbers_are_refused_with_the_bound():
    for key, value, bound in (("learner.lr", 0, "> 0"), ("trainer.iterations", -1, ">= 1"),
                              ("env_pool.step_timeout_s", 0, "> 0"), ("agent.sampling.temperature", -0.5, ">= 0")):
        problems, _ = override_problems(["command=train", f"{key}={value}"])
        assert any(f"{key}={value}: must be {bound}" in p for p in problems), (key, problems)
    assert math.isfinite(0.0)


def test_a_config_error_is_a_config_error():
    assert issubclass(ConfigProblems, ConfigError)


def test_the_summary_sections_defaults_are_the_run_times():
    """agent.summary is documented and checked by the schema, read at run time by agent/render.py (which the schema
    may not import below it): the two must agree."""
    from dataclasses import asdict

    from agentforge.agent.render import AgentConfig, SummarySettings
    from agentforge.schema.groups import SummarySchema

    assert asdict(SummarySettings()) == asdict(SummarySchema())
    assert AgentConfig(history="summary", summary={"trigger": 0.5}).summary == SummarySettings(trigger=0.5)
