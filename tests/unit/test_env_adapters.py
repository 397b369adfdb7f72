"""The library adapters on the real libraries: each episode equals the library's own step loop step by step, RNG
isolation keeps interleaved episodes reproducible, and bad ids and options are refused with the valid ones."""

from __future__ import annotations

import random

import pytest

from agentforge.envs.adapters.common import PrivateRng
from agentforge.envs.base import ENVS, make_env
from agentforge.errors import ConfigError
from agentforge.types import Task

gymnasium = pytest.importorskip("gymnasium")
gem = pytest.importorskip("gem")
ta = pytest.importorskip("textarena")
rg = pytest.importorskip("reasoning_gym")


def play(env, seed: int, actions: list[str]) -> list[tuple]:
    first = env.reset(Task("x", seed))
    record: list[tuple] = [("reset", first.text)]
    for action in actions:
        result = env.step(action)
        record.append((result.observation.text, result.reward, result.done))
        if result.done:
            break
    return record


def test_the_adapters_are_registered_and_listed() -> None:
    assert {"gym", "gem", "textarena", "reasoning_gym"} <= set(ENVS.builtin_names())


# -- Gymnasium ------------------------------------------------------------------------------------------------------
def test_gym_frozenlake_equals_gymnasiums_loop_step_by_step() -> None:
    from agentforge.envs.adapters.gym import ansi_to_text

    rng = random.Random(0)
    names = ["left", "down", "right", "up"]
    for seed in (1, 2, 5):
        actions = [rng.choice(names) for _ in range(30)]
        env = make_env("gym", {"id": "FrozenLake-v1"})  # slippery: the seed decides the slips
        lib = gymnasium.make("FrozenLake-v1", render_mode="ansi")
        lib.reset(seed=seed)
        expected: list[tuple] = [("reset", ansi_to_text(lib.render(), "P"))]
        for action in actions:
            _, reward, terminated, truncated, _ = lib.step(names.index(action))
            expected.append((ansi_to_text(lib.render(), "P"), float(reward), terminated or truncated))
            if terminated or truncated:
                break
        assert play(env, seed, actions) == expected
        env.close()


def test_gym_success_rule_and_named_invalid_action() -> None:
    env = make_env("gym", {"kwargs": {"is_slippery": False}})
    env.reset(Task("gym", 0))
    refused = env.step("jump")
    assert refused.info["executable"] is False and "admissible actions: left, down, right, up" in \
        refused.info["invalid_action"]
    results = [env.step(a) for a in ["right", "right", "down", "down", "down", "right"]]
    assert results[-1].done and results[-1].won and results[-1].reward == 1.0
    assert not any(r.won for r in results[:-1])


def test_gym_map_per_seed_draws_a_lake_per_seed_and_held_out_lakes_are_distinct_and_never_trained_on() -> None:
    """Seeds draw lakes, and small lakes repeat: held-out lakes are told apart by content (the lake), not by seed."""
    from agentforge.envs.task_keys import digest, reserve_held_out
    from agentforge.tasks import task_sampler
    from agentforge.tasks.held_out import TrainingFilter

    options = {"kwargs": {"is_slippery": False}, "map_per_seed": 4}
    env = make_env("gym", options)
    assert env.reset(Task("gym", 7)).text == env.reset(Task("gym", 7)).text
    lakes = [env.task_key(Task("gym", seed)) for seed in range(200)]
    assert len(set(lakes)) < len(lakes)  # 4x4 lakes repeat across seeds: seeds alone do not hold lakes out
    held_out, keyer = reserve_held_out("gym", options, reserve=16, use_cache=False)
    evaluation, test = held_out.sets["eval"]["gym"], held_out.sets["test"]["gym"]
    assert len(set(evaluation.digests)) == len(evaluation.digests) == 16
    assert not set(evaluation.digests) & set(test.digests)
    training = TrainingFilter(keyer.key, digest, held_out.reserved())
    drawn = task_sampler("gym", options, "train", admit=training.admit).sample(300)
    assert training.skipped > 0 and not {digest(keyer.key(t)) for t in drawn} & held_out.reserved()
    keyer.close()


def test_gym_refuses_bad_ids_options_and_spaces() -> None:
    with pytest.raises(ConfigError, match=r"unknown id 'FrozenLake-v9'.*Did you mean FrozenLake-v1.*Valid id values:"
                                          r".*Taxi"):
        make_env("gym", {"id": "FrozenLake-v9"})
    with pytest.raises(ConfigError, match=r"does not take option\(s\) slippery.*valid options:.*is_slippery"):
        make_env("gym", {"kwargs": {"slippery": False}})
    with pytest.raises(ConfigError, match="Discrete action space"):
        make_env("gym", {"id": "Pendulum-v1"})
    with pytest.raises(ConfigError, match="Valid success values: positive_reward, terminated"):
        make_env("gym", {"success": "won"})


# -- GEM ------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("env_id,moves", [
    ("game:GuessTheNumber-v0-easy", ["5", "3", "8", "2", "9"]),
    ("game:Game2048-v0-easy", ["up", "left", "down", "right"] * 3),  # a random tile after every move
])
def test_gem_equals_gems_loop_step_by_step_even_interleaved(env_id: str, moves: list[str]) -> None:
    lib = gem.make(env_id)
    expected: list[tuple] = []
    for seed in (3, 4):
        obs, _ = lib.reset(seed=seed)
        episode: list[tuple] = [("reset", obs)]
        for move in moves:
            obs, reward, terminated, truncated, _ = lib.step(f"\\boxed{{{move}}}")
            episode.append((obs, float(reward), bool(terminated or truncated)))
            if terminated or truncated:
                break
        expected.append(episode)
    # two adapter envs stepped in lockstep, with foreign draws from the global RNG in between (a busy worker)
    envs = [make_env("gem", {"id": env_id}) for _ in (3, 4)]
    records = [[("reset", e.reset(Task("gem", s)).text)] for e, s in zip(envs, (3, 4), strict=True)]
    live = [True, True]
    for move in moves:
        for i, env in enumerate(envs):
            if live[i]:
                random.random()
                result = env.step(move)
                records[i].append((result.observation.text, result.reward, result.done))
                live[i] = not result.done
    assert records == expected


def test_gem_win_is_a_terminating_success_reward() -> None:
    env = make_env("gem", {"id": "game:GuessTheNumber-v0-easy"})
    env.reset(Task("gem", 11))
    for guess in range(1, 11):
        result = env.step(str(guess))
        if result.done:
            break
    lib = gem.make("game:GuessTheNumber-v0-easy")
    lib.reset(seed=11)
    assert result.won == (result.reward >= 1.0) and (lib.game_number <= 4) == result.won


def test_gem_refuses_unknown_ids_downloads_and_missing_data() -> None:
    with pytest.raises(ConfigError, match=r"unknown id 'game:GuessTheNumber-v0'.*game:GuessTheNumber-v0-easy"):
        make_env("gem", {"id": "game:GuessTheNumber-v0"})
    with pytest.raises(ConfigError, match=r"math:GSM8K.*Hugging Face dataset 'axon-rl/GSM-8k'.*refused at start"):
        make_env("gem", {"id": "math:GSM8K"})
    with pytest.raises(ConfigError, match=r"nltk's 'words' corpus"):
        make_env("gem", {"id": "game:Wordle-v0-easy"})
    with pytest.raises(ConfigError, match=r"does not take option\(s\) max_turn\b.*valid options: max_number, "
                                          r"max_turns, min_number"):
        make_env("gem", {"kwargs": {"max_turn": 3}})
    with pytest.raises(ConfigError, match="no {action} field"):
        make_env("gem", {"action_format": "\\boxed{{}}"})


# -- TextArena ------------------------------------------------------------------------------------------------------
def test_textarena_single_player_equals_textarenas_loop() -> None:
    moves = ["10", "5", "oops", "15", "3", "12", "7", "18", "1", "20", "2", "19"]
    lib = ta.make("GuessTheNumber-v0")
    lib.reset(num_players=1, seed=9)
    expected: list[tuple] = [("reset", lib.get_observation()[1])]
    for move in moves:
        done, _ = lib.step(f"[{move}]" if move != "oops" else "oops")
        reward = 0.0
        if done:
            rewards, _ = lib.close()
            reward = float(rewards[0])
        expected.append((lib.get_observation()[1], reward, done))
        if done:
            break
    env = make_env("textarena", {"action_format": "{action}"})
    got = play(env, 9, [f"[{m}]" if m != "oops" else "oops" for m in moves])
    assert got == expected
    env.reset(Task("textarena", 9))
    env.step("[10]")
    refused = env.step("oops")
    assert refused.info["executable"] is False and "Invalid move format" in refused.info["invalid_action"]


def test_a_textarena_env_reused_for_the_next_game_starts_it_clean() -> None:
    """TextArena's observation wrappers keep their log through reset; the env host reuses one env per slot, so a
    reset must give what a fresh env gives, whatever the slot played before."""
    for env_id, options in (("GuessTheNumber-v0", {}), ("TicTacToe-v0", {"opponent": "self"})):
        fresh = make_env("textarena", {"id": env_id, **options}).reset(Task("textarena", 3))
        env = make_env("textarena", {"id": env_id, **options})
        env.reset(Task("textarena", 8))
        for move in ("3", "7", "5", "4"):
            if env.step(move).done:
                break
        again = env.reset(Task("textarena", 3))
        assert again.text == fresh.text and again.text.count("You are Player") == 1


def test_textarena_two_player_against_the_random_opponent_equals_the_library_loop() -> None:
    from agentforge.envs.adapters.textarena import random_move

    for seed, player in ((4, 0), (5, 1)):
        policy = random.Random(100 + seed)
        lib = ta.make("TicTacToe-v0")
        lib.reset(num_players=2, seed=seed)
        opponent = random.Random(seed)
        policy_moves: list[str] = []
        done = False
        while not done:
            current, observation = lib.get_observation()
            if current == player:
                move = random_move(observation, policy)
                policy_moves.append(move)
                done, _ = lib.step(move)
            else:
                done, _ = lib.step(random_move(observation, opponent))
        rewards, _ = lib.close()
        env = make_env("textarena", {"id": "TicTacToe-v0", "player": player, "action_format": "{action}"})
        env.reset(Task("textarena", seed))
        results = [env.step(move) for move in policy_moves]
        assert [r.done for r in results] == [False] * (len(results) - 1) + [True]
        assert results[-1].reward == float(rewards[player]) and results[-1].info["rewards"] == rewards
        assert results[-1].won == (rewards[player] > rewards[1 - player])
        assert all(r.reward == 0.0 for r in results[:-1])


def test_textarena_refuses_bad_ids_options_and_opponents() -> None:
    with pytest.raises(ConfigError, match=r"unknown id 'GuessTheNumbr-v0'.*Did you mean GuessTheNumber-v0"):
        make_env("textarena", {"id": "GuessTheNumbr-v0"})
    with pytest.raises(ConfigError, match=r"does not take option\(s\) top.*valid options: max_number, max_turns, "
                                          r"min_number"):
        make_env("textarena", {"kwargs": {"top": 3}})
    with pytest.raises(ConfigError, match=r"unknown opponent 'best'.*model, pkg.module:callable, random"):
        make_env("textarena", {"id": "TicTacToe-v0", "opponent": "best"})
    with pytest.raises(ConfigError, match=r"opponent=self \(self-play\) needs a game of two or more players, but "
                                          r"'GuessTheNumber-v0' is played by 1; choose a two-player game"):
        make_env("textarena", {"id": "GuessTheNumber-v0", "opponent": "self"})
    with pytest.raises(ConfigError, match=r"player=2; valid: -1 .* or 0..1"):
        make_env("textarena", {"id": "TicTacToe-v0", "player": 2})


# -- reasoning-gym --------------------------------------------------------------------------------------------------
def test_reasoning_gym_equals_the_dataset_and_its_verifier() -> None:
    from reasoning_gym.factory import create_curriculum

    curriculum = create_curriculum("basic_arithmetic")
    curriculum.set_global_level(0)
    config = curriculum.generate_configuration()
    env = make_env("reasoning_gym", {"task": "basic_arithmetic", "difficulty": 0})
    for seed in (0, 1, 1_000_000):
        fields = {k: getattr(config, k) for k in config.__dataclass_fields__ if k not in ("seed", "size")}
        dataset = rg.create_dataset("basic_arithmetic", seed=seed, size=1, **fields)
        entry = dataset[0]
        assert env.reset(Task("reasoning_gym", seed)).text == entry["question"]
        wrong = env.step("not a number")
        assert (wrong.reward, wrong.done, wrong.won) == (dataset.score_answer("not a number", entry), True, False)
        env.reset(Task("reasoning_gym", seed))
        right = env.step(entry["answer"])
        assert (right.reward, right.done, right.won) == (1.0, True, True)


def test_reasoning_gym_expert_answers_and_retries() -> None:
    from agentforge.envs.adapters.reasoning_gym import expert_actions

    options = {"task": "chain_sum", "difficulty": 0, "max_attempts": 2}
    env = make_env("reasoning_gym", options)
    task = Task("reasoning_gym", 42)
    [answer] = expert_actions(task, options)
    env.reset(task)
    first = env.step("-1")
    assert not first.done and "incorrect (attempt 1 of 2)" in first.observation.text
    assert env.step(answer).won


def test_reasoning_gym_refuses_bad_tasks_configs_and_levels() -> None:
    with pytest.raises(ConfigError, match=r"unknown task 'basic_arithmetics'.*Did you mean basic_arithmetic"):
        make_env("reasoning_gym", {"task": "basic_arithmetics"})
    with pytest.raises(ConfigError, match=r"does not take option\(s\) terms.*valid options:.*max_terms"):
        make_env("reasoning_gym", {"config": {"terms": 2}})
    with pytest.raises(ConfigError, match=r"difficulty=9 .*valid levels: 0..4"):
        make_env("reasoning_gym", {"difficulty": 9})


# -- shared ---------------------------------------------------------------------------------------------------------
def test_private_rng_leaves_the_global_generators_alone() -> None:
    random.seed(1)
    before = random.getstate()
    rng = PrivateRng()
    rng.seed(5)
    with rng.active():
        first = random.random()
    assert random.getstate() == before
    other = PrivateRng()
    other.seed(5)
    with other.active():
        assert random.random() == first
    with rng.active():
        second = random.random()
    with other.active():
        assert random.random() == second


# -- verifiers ------------------------------------------------------------------------------------------------------
def _scripted_client(replies: list[str]):
    """A verifiers client answering from a list: to run the library's own rollout loop with known moves."""
    import time as _time

    from verifiers.legacy.clients.client import Client
    from verifiers.legacy.types import Response, ResponseMessage

    class Scripted(Client):
        def setup_client(self, config):
            return None

        async def to_native_tool(self, tool):
            return tool

        async def to_native_prompt(self, messages):
            return messages, {}

        async def get_native_response(self, prompt, model, sampling_args, tools=None, **kwargs):
            self.prompts.append(list(prompt))
            return replies[len(self.prompts) - 1]

        async def raise_from_native_response(self, response):
            return None

        async def from_native_response(self, response):
            return Response(id="t", created=int(_time.time()), model="m",
                            message=ResponseMessage(content=response, finish_reason="stop", is_truncated=False))

        async def close(self):
            return None

    client = Scripted(None)
    client.prompts = []
    return client


def test_verifiers_episode_equals_the_librarys_own_rollout_and_rubric() -> None:
    import asyncio

    pytest.importorskip("verifiers")
    from agentforge.envs.adapters.verifiers import since_last_reply

    env = make_env("verifiers", {})
    vf_env = env.vf_env
    for seed, split in ((3, "train"), (1_000_001, "eval")):
        task = Task("verifiers", seed, split)
        data = vf_env.get_dataset() if split == "train" else vf_env.get_eval_dataset()
        row = dict(data[seed % len(data)])
        target = int(row["answer"])
        # max_turns=4: a 4th reply would end the rollout unjudged (verifiers stops at the turn limit first)
        moves = [str(n) for n in range(1, 11) if n != target][:1] + ["no idea", str(target)]
        client = _scripted_client(moves)

        async def library(row: dict = row, client=client) -> dict:
            state = await vf_env.rollout(dict(row), client, "m", {})
            await vf_env.rubric.score_rollout(state)
            return state

        state = asyncio.run(library())
        expected = [since_last_reply(p) for p in client.prompts]
        first = env.reset(task)
        got = [first.text]
        results = []
        for move in moves:
            result = env.step(move)
            results.append(result)
            if result.done:
                break
            got.append(result.observation.text)
        assert got == expected and len(got) == 3  # the library asked 3 times: the task, then 2 answers
        assert [r.reward for r in results] == [0.0, 0.0, state["reward"]] and state["reward"] == 1.0
        assert results[-1].done and results[-1].won
        assert ("higher" in got[1] or "lower" in got[1]) and "not a number" in got[2]


def test_verifiers_refuses_a_missing_or_bad_entry() -> None:
    pytest.importorskip("verifiers")
    with pytest.raises(ConfigError, match="needs entry=pkg.module:load_environment"):
        make_env("verifiers", {"entry": None})
    with pytest.raises(ConfigError, match="cannot be loaded"):
        make_env("verifiers", {"entry": "agentforge.envs.adapters.verifiers_example:nope"})
    with pytest.raises(ConfigError, match=r"does not take args \['size'\]"):
        make_env("verifiers", {"args": {"size": 3}})



def test_gym_frozenlake_expert_plans_a_winning_walk_on_each_lake() -> None:
    from agentforge.envs.adapters.gym import expert_actions, frozenlake_plan

    options = {"kwargs": {"is_slippery": False}, "map_per_seed": 4}
    for seed in (500_000, 500_001, 500_002):
        plan = expert_actions(Task("gym", seed), options)
        env = make_env("gym", options)
        env.reset(Task("gym", seed))
        results = [env.step(action) for action in plan]
        assert results[-1].won and not any(r.done for r in results[:-1])
    assert frozenlake_plan(["SH", "HG"]) is None
    assert expert_actions(Task("gym", 0), {"id": "CliffWalking-v1"}) is None


def test_textarena_check_options_refuses_a_missing_opponent_model_folder(tmp_path) -> None:
    from agentforge.envs.adapters.textarena import TextArenaEnv

    with pytest.raises(ConfigError, match="is not an HF model folder"):
        TextArenaEnv.check_options({"id": "TicTacToe-v0", "opponent": "model", "opponent_model": str(tmp_path)},
                                   ["train"])


def test_every_adapter_has_a_prompt_template() -> None:
    from agentforge.agent.prompts import prompt_for

    for name in ("gym", "gem", "textarena", "reasoning_gym", "verifiers"):
        assert prompt_for(name).action_tag == "action"


def test_verifiers_env_built_on_a_thread_leaves_the_signal_handlers_alone() -> None:
    import signal
    import threading

    pytest.importorskip("verifiers")
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    built: list = []
    thread = threading.Thread(target=lambda: built.append(make_env("verifiers", {})))  # as an env worker does
    thread.start()
    thread.join()
    assert built and (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before
    built[0].close()


def test_textarena_refuses_games_needing_a_download_or_a_key(monkeypatch) -> None:
    monkeypatch.delenv("OPENROUTER_API_KEY", raising=False)
    with pytest.raises(ConfigError, match=r"'Wordle-v0' needs nltk's 'words' data"):
        make_env("textarena", {"id": "Wordle-v0"})
    with pytest.raises(ConfigError, match=r"'TwentyQuestions-v0' calls a hosted model and needs its key.*OPENROUTER"):
        make_env("textarena", {"id": "TwentyQuestions-v0"})
