"""TJPO: descriptors, diversity credits (every numerical rule of ALGORITHMS.md) and the combined advantage."""

from __future__ import annotations

import math
import sys
import textwrap
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from agentforge.algorithms import GiGPO, make_algorithm
from agentforge.algorithms.descriptors import describe_group, descriptors_for_env, get_descriptor
from agentforge.algorithms.diversity import (
    determinantal_credit,
    determinantal_credit_detail,
    dpp_diversity,
    group_credit,
    group_diversity,
    pairwise_credit,
    pairwise_diversity,
    zscore,
)
from agentforge.envs.alfworld.env import ACTION_TYPES
from agentforge.errors import AgentforgeError, ConfigError
from agentforge.types import Group, Task, Trajectory, Turn

pytestmark = pytest.mark.unit

ETA = 1e-4
A = 1 + ETA                      # diagonal of L = K + ηI
K_ONEHOT = math.exp(-2 / 200)    # K between two distinct one-hot vectors with σ = 10: exp(-‖Δ‖²/(2σ²)), ‖Δ‖² = 2
E1, E2, E3 = [1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]


def turn(action: str | None, reward: float = 0.0, anchor: Any = "s", **info: Any) -> Turn:
    return Turn(prompt_ids=[1], response_ids=[2], logprobs=[-0.1], forced_mask=[False], response_text="",
                action=action, valid=action is not None, reward=reward, env_reward=reward, anchor=anchor,
                observation=str(anchor), info=info)


def trajectory(turns: Sequence[Turn], won: bool = False, seed: int = 0, index: int = 0) -> Trajectory:
    return Trajectory(task=Task("test", seed), rollout_index=index, turns=list(turns), won=won)


def vector_group(vectors: Sequence[Sequence[float]], won: Sequence[bool] | None = None, seed: int = 0) -> Group:
    """A group whose trajectories carry a ready-made descriptor vector in their first turn's info."""
    won = won or [False] * len(vectors)
    return Group(Task("test", seed), [
        trajectory([turn("a", reward=float(w), anchor=f"s{seed}", vec=list(v))], won=w, seed=seed, index=i)
        for i, (v, w) in enumerate(zip(vectors, won, strict=True))
    ])


# ---- pairwise -------------------------------------------------------------------------------------------------------
def test_pairwise_credit_and_its_zscore_by_hand():
    # d12 = √2, d13 = 0, d23 = √2 -> c = (√2/2, √2, √2/2); mean 2√2/3, unbiased std √(1/6)
    vectors = np.array([E1[:2], E2[:2], E1[:2]])
    raw = pairwise_credit(vectors)
    np.testing.assert_allclose(raw, [math.sqrt(2) / 2, math.sqrt(2), math.sqrt(2) / 2])
    expected = (raw - 2 * math.sqrt(2) / 3) / math.sqrt(1 / 6)
    np.testing.assert_allclose(group_credit(vectors, "pairwise"), expected)
    np.testing.assert_allclose(expected, [-1 / math.sqrt(3), 2 / math.sqrt(3), -1 / math.sqrt(3)])


def test_identical_descriptors_give_zero_credit_under_both_functionals():
    vectors = np.array([E1, E1, E1, E1])
    for functional in ("pairwise", "determinantal"):
        np.testing.assert_array_equal(group_credit(vectors, functional), np.zeros(4))


def test_a_group_of_one_gets_zero_credit():
    for functional in ("pairwise", "determinantal"):
        np.testing.assert_array_equal(group_credit(np.array([E1]), functional), [0.0])
    assert zscore(np.array([3.0])).tolist() == [0.0]
    assert group_credit(np.zeros((0, 3)), "pairwise").size == 0


def test_one_hot_descriptors_that_all_differ_get_equal_credit_and_so_zero():
    np.testing.assert_allclose(pairwise_credit(np.array([E1, E2, E3])), [math.sqrt(2)] * 3)
    np.testing.assert_array_equal(group_credit(np.array([E1, E2, E3]), "pairwise"), [0.0, 0.0, 0.0])


# ---- determinantal --------------------------------------------------------------------------------------------------
def test_determinantal_credit_by_hand_with_a_duplicate():
    # φ = (e1, e2, e1): L = [[a,k,1],[k,a,k],[1,k,a]], det L = a³ − 2ak² + 2k² − a,
    # det L₋₁ = det L₋₃ = a² − k², det L₋₂ = a² − 1; the unique τ₂ adds the most volume -> max-scaled to 1.
    a, k = A, K_ONEHOT
    det_all = a**3 - 2 * a * k * k + 2 * k * k - a
    assert det_all > 1e-10  # the regular branch
    raw = np.array([det_all / (a * a - k * k), det_all / (a * a - 1), det_all / (a * a - k * k)])
    np.testing.assert_allclose(determinantal_credit(np.array([E1, E2, E1])), raw / raw.max(), rtol=1e-6)
    credit = group_credit(np.array([E1, E2, E1]), "determinantal")
    assert credit[1] > 0 > credit[0] == pytest.approx(credit[2])


def test_two_distinct_trajectories_get_equal_determinantal_credit():
    # raw c_i = ((a² − k²) / a) for both, so max-scaling gives 1 and 1
    np.testing.assert_allclose(determinantal_credit(np.array([E1, E2])), [1.0, 1.0])
    np.testing.assert_array_equal(group_credit(np.array([E1, E2]), "determinantal"), [0.0, 0.0])


def test_determinantal_credit_equals_explicit_minor_determinants_on_random_groups():
    rng = np.random.default_rng(1)
    for size in (2, 3, 5, 8):
        vectors = rng.dirichlet(np.ones(4), size=size)
        gram = np.exp(-((vectors[:, None] - vectors[None]) ** 2).sum(-1) / (2 * 0.3**2)) + ETA * np.eye(size)
        minors = [np.linalg.det(np.delete(np.delete(gram, i, 0), i, 1)) for i in range(size)]
        raw = np.linalg.det(gram) / np.array(minors)
        np.testing.assert_allclose(determinantal_credit(vectors, sigma=0.3), raw / raw.max(), rtol=1e-8)


def test_determinant_below_the_floor_falls_back_to_mean_kernel_distance():
    # four copies of e1 and one e2: det L ~ η³ < 1e-10 -> c_i = mean_{j≠i}(1 − K_ij), then max-scaled
    vectors = np.array([E1, E1, E1, E1, E2])
    l_matrix = np.exp(-((vectors[:, None] - vectors[None]) ** 2).sum(-1) / 200) + ETA * np.eye(5)
    assert np.linalg.det(l_matrix) <= 1e-10
    raw = np.array([(1 - K_ONEHOT) / 4] * 4 + [1 - K_ONEHOT])
    np.testing.assert_allclose(determinantal_credit(vectors), raw / raw.max())
    np.testing.assert_allclose(determinantal_credit(vectors), [0.25, 0.25, 0.25, 0.25, 1.0])


def test_minor_below_the_floor_while_the_determinant_is_valid_gives_credit_one():
    # σ = 0.1 makes e1 and e2 orthogonal in kernel space: L = [[a,1,0],[1,a,0],[0,0,a]], det L = a(a² − 1);
    # removing τ₃ leaves det a² − 1. A floor between the two exercises the second fallback: c₃ = 1.
    a = A
    floor = (a * a - 1) * (1 + ETA / 2)
    credit = determinantal_credit(np.array([E1[:2], E1[:2], E2[:2]]), sigma=0.1, det_floor=floor)
    np.testing.assert_allclose(credit, [(a * a - 1) / a, (a * a - 1) / a, 1.0], rtol=1e-9)


def test_large_groups_underflow_to_the_fallback_without_nan():
    rng = np.random.default_rng(0)
    vectors = rng.dirichlet(np.ones(6), size=64)
    for functional in ("determinantal", "pairwise"):
        credit = group_credit(vectors, functional)
        assert np.all(np.isfinite(credit))
        assert credit.mean() == pytest.approx(0.0, abs=1e-9)
        assert credit.std(ddof=1) == pytest.approx(1.0)
    kernel = np.exp(-((vectors[:, None] - vectors[None]) ** 2).sum(-1) / 200)
    raw = (1 - kernel).sum(1) / 63
    np.testing.assert_allclose(determinantal_credit(vectors), raw / raw.max())


def test_sigma_10_on_simplex_descriptors_leaves_every_group_of_seven_to_the_fallback():
    # ℓ1-normalised descriptors: ‖Δ‖² ≤ 2, so every K_ij ≥ e^−0.01 at σ = 10 and det(L) of 7+ members drops under
    # 1e-10 however different the descriptors are (even all distinct one-hots). σ = 0.3 leaves the ratio in charge.
    rng = np.random.default_rng(3)
    assert determinantal_credit_detail(np.eye(7))[1] == "kernel_distance"
    for _ in range(20):
        vectors = rng.dirichlet(np.ones(8), size=int(rng.integers(7, 17)))
        assert rbf_kernel_min(vectors, 10.0) >= math.exp(-0.01)
        assert determinantal_credit_detail(vectors, sigma=10.0)[1] == "kernel_distance"
        assert determinantal_credit_detail(vectors, sigma=0.3)[1] is None
    assert determinantal_credit_detail(np.array([E1, E2, E1]))[1] is None  # small groups: the ratio decides


def rbf_kernel_min(vectors: np.ndarray, sigma: float) -> float:
    return float(np.exp(-((vectors[:, None] - vectors[None]) ** 2).sum(-1) / (2 * sigma**2)).min())


def test_minor_fallback_is_reported_as_unit_credit():
    floor = (A * A - 1) * (1 + ETA / 2)
    _, fallback = determinantal_credit_detail(np.array([E1[:2], E1[:2], E2[:2]]), sigma=0.1, det_floor=floor)
    assert fallback == "unit_credit"


# ---- evaluation metrics ---------------------------------------------------------------------------------------------
def test_set_diversity_metrics_by_hand():
    vectors = np.array([E1[:2], E2[:2], E1[:2]])
    assert pairwise_diversity(vectors) == pytest.approx(2 * math.sqrt(2) / 3)
    a, k = A, K_ONEHOT
    assert dpp_diversity(vectors) == pytest.approx((a**3 - 2 * a * k * k + 2 * k * k - a) ** (1 / 3), rel=1e-6)
    assert math.isnan(pairwise_diversity(vectors[:1])) and math.isnan(dpp_diversity(vectors[:1]))


def test_group_diversity_uses_successful_trajectories_of_groups_with_two_or_more(monkeypatch):
    from agentforge.algorithms import descriptors

    monkeypatch.setitem(descriptors.DESCRIPTORS._items, "vec", descriptors.Descriptor("vec", _vec))
    qualifying = vector_group([E1, E2, E3], won=[True, True, False], seed=1)   # successes e1, e2: D = √2
    too_few = vector_group([E1, E2], won=[True, False], seed=2)              # one success: no value
    out = group_diversity([qualifying, too_few], ["vec"])
    assert out["div_pair/vec"] == pytest.approx(math.sqrt(2))
    assert out["div_dpp/vec"] == pytest.approx(math.sqrt(A * A - K_ONEHOT**2))
    assert out["div_groups/vec"] == 1
    assert math.isnan(group_diversity([too_few], ["vec"])["div_pair/vec"])


def _vec(t: Trajectory) -> list[float]:
    return t.turns[0].info["vec"]


# ---- TJPO advantages ------------------------------------------------------------------------------------------------
@pytest.fixture
def vec_descriptor(monkeypatch):
    from agentforge.algorithms import descriptors

    monkeypatch.setitem(descriptors.DESCRIPTORS._items, "vec", descriptors.Descriptor("vec", _vec))


def test_lambda_zero_is_exactly_gigpo(vec_descriptor):
    groups = [vector_group([E1, E2, E1], won=[True, False, True], seed=s) for s in range(3)]
    tjpo = make_algorithm({"name": "tjpo", "descriptor": "vec", "lambda": 0.0})
    np.testing.assert_array_equal(tjpo.advantages(groups), GiGPO().advantages(groups))


def test_tjpo_adds_lambda_times_the_zscored_credit_on_every_turn(vec_descriptor):
    group = vector_group([E1[:2], E2[:2], E1[:2]], seed=0)
    group.trajectories[1].turns.append(turn("b", anchor="t", vec=[0.0, 1.0]))  # τ₂ has two turns
    tjpo = make_algorithm({"name": "tjpo", "descriptor": "vec", "functional": "pairwise", "lambda": 0.5})
    credit = [-1 / math.sqrt(3), 2 / math.sqrt(3), -1 / math.sqrt(3)]
    expected = GiGPO().advantages([group]) + 0.5 * np.array([credit[0], credit[1], credit[1], credit[2]])
    np.testing.assert_allclose(tjpo.advantages([group]), expected)
    assert group.trajectories[1].meta["diversity_credit"] == pytest.approx(credit[1])
    assert "diversity_credit_abs_mean" in tjpo.last_metrics


def test_successful_participants_only(vec_descriptor):
    group = vector_group([E1, E2, E3, E1], won=[True, True, False, True])
    tjpo = make_algorithm({"name": "tjpo", "descriptor": "vec", "participants": "successful", "lambda": 1.0})
    credit, _, _ = tjpo.trajectory_credits([group])
    assert credit[2] == 0.0
    np.testing.assert_allclose(credit[[0, 1, 3]], group_credit(np.array([E1, E2, E1]), "pairwise"))


def test_credits_never_mix_groups(vec_descriptor):
    groups = [vector_group([E1, E2, E1], seed=0), vector_group([E3, E3], seed=1)]
    tjpo = make_algorithm({"name": "tjpo", "descriptor": "vec"})
    credit, _, _ = tjpo.trajectory_credits(groups)
    np.testing.assert_allclose(credit[:3], group_credit(np.array([E1, E2, E1]), "pairwise"))
    np.testing.assert_array_equal(credit[3:], [0.0, 0.0])


def test_tjpo_logs_the_fraction_of_groups_each_determinantal_fallback_decided(vec_descriptor):
    rng = np.random.default_rng(4)
    big = [vector_group(rng.dirichlet(np.ones(6), size=8).tolist(), seed=s) for s in range(3)]
    small = vector_group([E1, E2, E1], seed=3)
    groups = [*big, small]
    dpp = make_algorithm({"name": "tjpo", "descriptor": "vec", "functional": "determinantal"})
    dpp.advantages(groups)
    assert dpp.last_metrics["dpp_fallback_rate"] == pytest.approx(0.75)
    assert dpp.last_metrics["dpp_fallback_rate/kernel_distance"] == pytest.approx(0.75)
    assert dpp.last_metrics["dpp_fallback_rate/unit_credit"] == 0.0
    narrow = make_algorithm({"name": "tjpo", "descriptor": "vec", "functional": "determinantal", "sigma": 0.3})
    narrow.advantages(groups)
    assert narrow.last_metrics["dpp_fallback_rate"] == 0.0
    pairwise = make_algorithm({"name": "tjpo", "descriptor": "vec", "functional": "pairwise"})
    pairwise.advantages(groups)
    assert "dpp_fallback_rate" not in pairwise.last_metrics


# ---- descriptors ----------------------------------------------------------------------------------------------------
def test_alfworld_action_type_and_location_descriptors():
    turns = [
        turn("go to countertop 1", action_type="go to", location_category="countertop"),
        turn("take apple 1 from countertop 1", action_type="take"),
        turn(None),  # an unparsable response: no action, not counted
        turn("go to fridge 1", action_type="go to", location_category="fridge"),
        turn("look", action_type="look"),
    ]
    actions = get_descriptor("action_type")(trajectory(turns))
    assert actions.size == len(ACTION_TYPES)
    expected = dict.fromkeys(ACTION_TYPES, 0.0) | {"go to": 0.5, "take": 0.25, "look": 0.25}
    np.testing.assert_allclose(actions, list(expected.values()))
    location = get_descriptor("location")
    vector = location(trajectory(turns))
    from agentforge.envs.alfworld.descriptors import alfworld_location_categories

    categories = alfworld_location_categories()
    assert vector[categories.index("countertop")] == 0.5 and vector[categories.index("fridge")] == 0.5
    assert vector.sum() == pytest.approx(1.0)


def test_sokoban_direction_transition_descriptor():
    moves = [turn("up"), turn("up"), turn("left"), turn(None), turn("down")]  # up→up, up→left, left→down
    vector = get_descriptor("direction_transition")(trajectory(moves)).reshape(4, 4)  # order up, down, left, right
    expected = np.zeros((4, 4))
    expected[0, 0] = expected[0, 2] = expected[2, 1] = 1 / 3
    np.testing.assert_allclose(vector, expected)
    assert get_descriptor("direction_transition")(trajectory([turn("up")])).sum() == 0.0  # no pair: all zero


def test_sokoban_spatial_coverage_descriptor():
    grid = textwrap.dedent("""\
        #####
        #P__#
        #_X_#
        #__O#
        #####""")
    turns = [turn("right", anchor=grid, player_pos=(1, 2)), turn("right", anchor="later", player_pos=(1, 3)),
             turn("left", anchor="later", player_pos=[1, 2])]  # a list, as after a JSON round trip
    vector = get_descriptor("spatial_coverage")(trajectory(turns)).reshape(5, 5)
    expected = np.zeros((5, 5))
    expected[1, 1], expected[1, 2], expected[1, 3] = 1 / 4, 2 / 4, 1 / 4
    np.testing.assert_allclose(vector, expected)


def test_descriptors_for_env():
    assert descriptors_for_env("alfworld") == ["action_type", "location"]
    assert descriptors_for_env("alfworld_intervention") == ["action_type", "location"]
    assert descriptors_for_env("sokoban") == ["direction_transition", "spatial_coverage"]
    assert descriptors_for_env("webshop") == []


# ---- user descriptors and bad input ---------------------------------------------------------------------------------
@pytest.fixture
def user_module(tmp_path, monkeypatch):
    (tmp_path / "my_descriptors.py").write_text(textwrap.dedent("""\
        import math
        def turns_and_invalid(trajectory):
            return [len(trajectory.turns), sum(not t.valid for t in trajectory.turns)]
        def matrix(trajectory):
            return [[1, 2], [3, 4]]
        def nan(trajectory):
            return [1.0, math.nan]
        def negative(trajectory):
            return [1.0, -1.0]
        def text(trajectory):
            return "abc"
        def varying(trajectory):
            return [1.0] * len(trajectory.turns)
        def broken(trajectory):
            raise KeyError("player_pos")
        NOT_CALLABLE = 3
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "my_descriptors"
    sys.modules.pop("my_descriptors", None)


def test_a_user_descriptor_by_dotted_path_trains(user_module):
    tjpo = make_algorithm({"name": "tjpo", "descriptor": f"{user_module}:turns_and_invalid"})
    group = Group(Task("test", 0), [trajectory([turn("a")] * n + [turn(None)] * m, index=i)
                                    for i, (n, m) in enumerate([(1, 0), (2, 2), (3, 1)])])
    expected = [[1, 0], [2 / 3, 1 / 3], [0.8, 0.2]]
    np.testing.assert_allclose(describe_group(tjpo.descriptor, group.trajectories), expected)
    assert np.all(np.isfinite(tjpo.advantages([group])))


@pytest.mark.parametrize(("fn", "message"), [
    ("matrix", r"shape \(2, 2\)"), ("nan", "non-finite"), ("negative", "negative entry"), ("text", "not a vector"),
    ("broken", "failed on"),
])
def test_bad_descriptor_output_names_the_descriptor(user_module, fn, message):
    descriptor = get_descriptor(f"{user_module}:{fn}")
    with pytest.raises(AgentforgeError, match=message) as info:
        descriptor(trajectory([turn("a")]))
    assert f"{user_module}:{fn}" in str(info.value)


def test_descriptor_dimension_must_not_vary_within_a_group(user_module):
    descriptor = get_descriptor(f"{user_module}:varying")
    with pytest.raises(AgentforgeError, match="different lengths"):
        describe_group(descriptor, [trajectory([turn("a")]), trajectory([turn("a"), turn("b")])])


def test_unknown_descriptor_lists_the_registered_names(user_module):
    with pytest.raises(ConfigError, match="valid descriptors: action_type, direction_transition, location"):
        make_algorithm({"name": "tjpo", "descriptor": "loaction"})
    with pytest.raises(ConfigError, match="could not be imported"):
        get_descriptor("no_such_module_xyz:fn")
    with pytest.raises(ConfigError, match="not callable"):
        get_descriptor(f"{user_module}:NOT_CALLABLE")


@pytest.mark.parametrize(("options", "message"), [
    ({"lambda": -0.1}, "negative"), ({"functional": "volume"}, "functional"),
    ({"participants": "winners"}, "participants"), ({"sigma": 0.0}, "sigma"),
    ({"lambda": 0.1, "lambda_": 0.2}, "not both"),
])
def test_bad_tjpo_options_are_rejected(options, message):
    with pytest.raises(ConfigError, match=message):
        make_algorithm({"name": "tjpo", **options})


# ---- recipes --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("recipe", "descriptor", "functional"), [
    ("tjpo_alfworld", "location", "pairwise"),
    ("tjpo_alfworld_location_dpp", "location", "determinantal"),
    ("tjpo_alfworld_action_pairwise", "action_type", "pairwise"),
    ("tjpo_alfworld_action_dpp", "action_type", "determinantal"),
    ("tjpo_sokoban", "direction_transition", "pairwise"),
])
def test_tjpo_recipes_compose_with_lambda_03(recipe, descriptor, functional):
    from agentforge.commands.config_check import check_config
    from agentforge.commands.train import eval_descriptor_names
    from agentforge.schema.compose import compose_config

    cfg = compose_config([f"recipe={recipe}", "command=train"])
    check_config(cfg)
    algorithm = make_algorithm(cfg.algorithm)
    assert (algorithm.config.descriptor, algorithm.config.functional, algorithm.config.lambda_) == (
        descriptor, functional, 0.3)
    assert cfg.trainer.eval_group_size >= 2  # diversity over successful rollouts needs several samples per task
    assert descriptor in eval_descriptor_names(cfg.env.name, algorithm)


def test_lambda_and_descriptor_overrides_from_the_command_line():
    from agentforge.schema.compose import compose_config

    cfg = compose_config(["recipe=tjpo_sokoban", "algorithm.lambda=0.5", "algorithm.descriptor=spatial_coverage"])
    algorithm = make_algorithm(cfg.algorithm)
    assert algorithm.config.lambda_ == 0.5 and algorithm.descriptor.name == "spatial_coverage"


def test_sigma_is_a_command_line_and_sweep_option():
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from agentforge.schema.compose import compose_config

    cfg = compose_config(["recipe=tjpo_alfworld_location_dpp", "algorithm.sigma=0.3"])
    assert make_algorithm(cfg.algorithm).config.sigma == 0.3
    sweep = OverridesParser.create().parse_overrides(["algorithm.sigma=0.1,0.3,1,10"])[0]
    assert sweep.is_sweep_override() and [float(v) for v in sweep.sweep_iterator()] == [0.1, 0.3, 1.0, 10.0]
    with pytest.raises(ConfigError, match="sigma"):
        make_algorithm({"name": "tjpo", "sigma": 0})


def test_the_tool_calls_descriptor_tells_apart_agents_that_used_different_tools():
    from agentforge.algorithms.descriptors import descriptors_for_env
    from agentforge.envs.agent_descriptors import agent_tool_calls
    from agentforge.types import Task, Trajectory, Turn

    def turn(*calls: str) -> Turn:
        return Turn([1], [2], [0.0], [False], "", None, True, 0.0, 0.0, "a", "o",
                    info={"tool_calls": [{"function": {"name": c, "arguments": "{}"}} for c in calls]})

    searched = Trajectory(Task("agent", 0), 0, [turn("search"), turn("search"), turn("answer")])
    again = Trajectory(Task("agent", 0), 1, [turn("search"), turn("search"), turn("answer")])
    answered = Trajectory(Task("agent", 0), 2, [turn("answer"), turn()])
    a, b, c = agent_tool_calls(searched), agent_tool_calls(again), agent_tool_calls(answered)
    assert a.shape == c.shape == (17,) and (a == b).all() and not (a == c).all()
    assert a[:8].sum() == 3 and a[8:16].sum() == 2 and c[-1] == 1  # 3 calls, 2 transitions; 1 reply without a tool
    assert descriptors_for_env("agent") == ["tool_calls"]


def test_an_env_owns_its_descriptors_and_a_plugin_env_brings_its_own(monkeypatch):
    """Descriptors are declared on the env's class and found through it by name (no list of env names in
    algorithms/); a plugin env's descriptor works by name like a built-in, and applies to that env's evals."""
    from agentforge.algorithms.descriptors import descriptors_for_env, get_descriptor, known_names
    from agentforge.envs.base import ENVS
    from agentforge.envs.sokoban import SokobanEnv
    from agentforge.envs.sokoban_descriptors import sokoban_direction_transition

    class AVariantOfSokoban(SokobanEnv):  # inherits the descriptors (as the suite's fault-injecting envs do)
        pass

    monkeypatch.setitem(ENVS._items, "a_sokoban_variant", AVariantOfSokoban)  # sorted before "sokoban"
    assert descriptors_for_env("sokoban") == ["direction_transition", "spatial_coverage"]
    assert descriptors_for_env("alfworld_intervention") == descriptors_for_env("alfworld") == ["action_type",
                                                                                                 "location"]
    assert descriptors_for_env("gym") == ["state_coverage"] and descriptors_for_env("search_qa") == []
    found = get_descriptor("direction_transition")
    assert found.fn is sokoban_direction_transition and found.env == "sokoban"  # the declaring env, not a subclass
    assert descriptors_for_env("a_sokoban_variant") == descriptors_for_env("sokoban")

    class PluginEnv:
        descriptors = {"turn_count": "agentforge.envs.base:acted_turns"}  # any function of a trajectory

    monkeypatch.setitem(ENVS._items, "plugin_env", PluginEnv)
    assert "turn_count" in known_names() and descriptors_for_env("plugin_env") == ["turn_count"]
    assert get_descriptor("turn_count").env == "plugin_env"
    with pytest.raises(ConfigError, match="valid descriptors: .*direction_transition.*turn_count"):
        get_descriptor("nope")
