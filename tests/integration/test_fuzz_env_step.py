"""Bad model output through real envs (issue 14, item 4): what the parser makes of any response, and any action
string at all, steps the env without an exception, and the next prompt renders.

One env instance per env family and module (ScienceWorld starts a JVM: one), stepped through as many episodes as
the examples need; an example that ends an episode resets it. Example counts are bounded per env so the module
runs in about a minute (ALFWorld and ScienceWorld dominate).
"""

from __future__ import annotations

import importlib.util
import math
import shutil
from dataclasses import dataclass, field

import pytest
from fuzz_text import any_text, huge_text, model_output, tag_soup
from hypothesis import given, settings
from hypothesis import strategies as st

from agentforge.agent.parsing import parse_response
from agentforge.agent.prompts import HistoryEntry, PromptTemplate, prompt_for
from agentforge.envs.base import EXECUTABLE, Env, make_env
from agentforge.envs.sokoban import ACTIONS as SOKOBAN_ACTIONS
from agentforge.types import Observation, StepResult, Task

pytestmark = pytest.mark.integration

MAX_OBSERVATION_CHARS = 20_000  # an env must not echo a 100k-character action back into the next prompt
# Cheap envs get more examples than the profile's default, the JVM and the PDDL engine fewer (both scale with it).
CHEAP = settings(max_examples=max(150, settings.default.max_examples))
SLOW = settings(max_examples=max(25, settings.default.max_examples // 10))
NASTY_ACTIONS = ["", " ", "\x00", "\x00look around\x00", "look\naround", "look around\r\n", "\u200blook around",
                 "\u202egnikool", "שלום", "مرحبا", "🙂" * 1000, "x" * 100_000, "go to " + "cabinet 1 " * 10_000,
                 "<think>", "</action>", "reset task", "RESET TASK", "0", "-1", "99999999999999999999", "%s %d {0}",
                 "\\", '"', "'", ";", "look around; inventory", "ſearch[x]", "\U0010ffff"]


@dataclass
class Player:
    """An env mid-episode plus what the rollout loop keeps: the observation and the history window."""

    name: str
    env: Env
    template: PromptTemplate
    observation: Observation = field(init=False)
    history: list[HistoryEntry] = field(default_factory=list)
    seed: int = 0
    done: bool = False

    def __post_init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.seed += 1
        self.observation = self.env.reset(Task(self.name, self.seed))
        self.history = []
        self.done = False

    def step(self, action: str) -> StepResult:
        """Step, check the result, render the next prompt; the next step resets when the episode is over (also
        after a failed check, so one failing example does not fail the rest)."""
        if self.done:
            self.reset()
        result = self.env.step(action)
        self.done = result.done
        check_result(result)
        self.history.append(HistoryEntry(self.observation.text, action))
        self.observation = result.observation
        step = len(self.history) + 1
        messages = self.template.messages(self.observation, self.history[-2:], step, False,
                                          self.history[0].observation, ())
        assert messages[-1]["content"]
        return result

    def respond(self, text: str) -> StepResult | None:
        """What the rollout loop does with a response: parse it; execute an admissible action (relaxed too)."""
        if self.done:
            self.reset()
        parsed = parse_response(text, self.observation.admissible, self.template.action_tag,
                                self.template.require_think)
        if parsed.action is None or not parsed.admissible:
            assert not parsed.valid and parsed.error
            return None
        return self.step(parsed.action)


def check_result(result: StepResult) -> None:
    assert isinstance(result, StepResult)
    assert isinstance(result.reward, float | int) and math.isfinite(result.reward)
    assert isinstance(result.done, bool) and isinstance(result.won, bool)
    assert isinstance(result.info.get(EXECUTABLE, True), bool)
    text = result.observation.text
    assert isinstance(text, str) and len(text) <= MAX_OBSERVATION_CHARS, f"observation of {len(text)} characters"


def player(name: str, options: dict) -> Player:
    return Player(name, make_env(name, options), prompt_for(name))


# Responses built around what the env accepts, so parsed actions also reach the env's deeper paths.
def framed(inner: st.SearchStrategy[str], tag: str = "action") -> st.SearchStrategy[str]:
    return st.tuples(st.one_of(any_text, tag_soup), inner).map(lambda p: f"<think>{p[0]}</think><{tag}>{p[1]}</{tag}>")


def bracketed(kinds: list[str]) -> st.SearchStrategy[str]:
    """`kind[<anything>]`: well formed actions with arbitrary, unicode or huge arguments."""
    return st.tuples(st.sampled_from(kinds), st.one_of(any_text, tag_soup, huge_text())).map(
        lambda p: f"{p[0]}[{p[1]}]")


# ---- Sokoban ----------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def sokoban() -> Player:
    return player("sokoban", {})


@CHEAP
@given(text=st.one_of(model_output, framed(st.sampled_from([*SOKOBAN_ACTIONS, " UP ", "Left\n"]))))
def test_sokoban_any_response(sokoban, text):
    sokoban.respond(text)


@CHEAP
@given(action=st.one_of(model_output, st.sampled_from(SOKOBAN_ACTIONS)))
def test_sokoban_any_action_string_moves_or_is_refused_by_name(sokoban, action):
    """Sokoban's contract differs from the other envs': its actions are a closed list the parser canonicalises to,
    so an unknown string is a caller bug and raises ValueError naming the admissible actions (the env pool's and
    replay's tests rely on it); anything else must not escape."""
    if action.strip().lower() in SOKOBAN_ACTIONS:
        sokoban.step(action)
        return
    if sokoban.done:
        sokoban.reset()
    with pytest.raises(ValueError, match="admissible actions: up, down, left, right"):
        sokoban.env.step(action)


# ---- search QA --------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def search_qa() -> Player:
    return player("search_qa", {})


@CHEAP
@given(text=st.one_of(model_output, framed(st.one_of(any_text, tag_soup, huge_text()), "search"),
                      framed(any_text, "answer")))
def test_search_qa_any_response(search_qa, text):
    search_qa.respond(text)


@CHEAP
@given(action=st.one_of(model_output, bracketed(["search", "answer", "SEARCH", "ſearch", "Answer "])))
def test_search_qa_any_action_string(search_qa, action):
    result = search_qa.step(action)
    if result.info.get("action") == "search":
        assert len(result.info["retrieved_ids"]) <= search_qa.env.top_k


# ---- WebShop ----------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def webshop() -> Player:
    return player("webshop", {"invalid_action_feedback": True})


@CHEAP
@given(text=st.one_of(model_output, framed(bracketed(["search", "click"]))))
def test_webshop_any_response(webshop, text):
    webshop.respond(text)


@CHEAP
@given(action=st.one_of(model_output, bracketed(["search", "click", "ſearch", "CLICK"]),
                        st.sampled_from(["click[buy now]", "click[next >]", "click[< prev]", "click[back to search]",
                                         "click[description]", "search[shoes]"])))
def test_webshop_any_action_string(webshop, action):
    if webshop.observation.admissible and action == "search[shoes]":
        action = webshop.observation.admissible[0]  # sometimes open what the page offers, to reach item pages
    webshop.step(action)


# ---- ALFWorld ---------------------------------------------------------------------------------------------------
needs_alfworld = pytest.mark.skipif(importlib.util.find_spec("textworld") is None
                                    or importlib.util.find_spec("alfworld") is None,
                                    reason="the ALFWorld engine is not installed (scripts/install_alfworld.sh)")


@pytest.fixture(scope="module")
def alfworld() -> Player:
    game = player("alfworld", {"data_source": "bundled", "max_steps": 20})
    yield game
    game.env.close()


@needs_alfworld
@SLOW
@given(text=st.one_of(model_output, framed(st.sampled_from(["look", "inventory", "go to countertop 1",
                                                             "GO  TO\tcabinet 1", "open fridge 1"]))))
def test_alfworld_any_response(alfworld, text):
    alfworld.respond(text)


@needs_alfworld
@SLOW
@given(action=st.one_of(model_output, st.sampled_from(["look", "go to countertop 1", "take", "put  in", "help"])))
def test_alfworld_any_action_string(alfworld, action):
    alfworld.step(action)


# ---- ScienceWorld (one JVM) --------------------------------------------------------------------------------------
needs_scienceworld = pytest.mark.skipif(importlib.util.find_spec("scienceworld") is None
                                        or shutil.which("java") is None,
                                        reason="ScienceWorld needs the scienceworld package and java")


@pytest.fixture(scope="module")
def scienceworld() -> Player:
    game = player("scienceworld", {"task_names": ["find-non-living-thing"], "max_steps": 15})
    yield game
    game.env.close()


@needs_scienceworld
@SLOW
@given(text=st.one_of(model_output, framed(st.sampled_from(["look around", "open door to kitchen", "0", "wait1"])),
                      framed(st.one_of(any_text, tag_soup))))
def test_scienceworld_any_response(scienceworld, text):
    scienceworld.respond(text)


@needs_alfworld
@pytest.mark.parametrize("action", NASTY_ACTIONS)
def test_alfworld_nasty_action(alfworld, action):
    alfworld.step(action)


@needs_scienceworld
@pytest.mark.parametrize("action", NASTY_ACTIONS)
def test_scienceworld_nasty_action(scienceworld, action):
    scienceworld.step(action)


@pytest.mark.parametrize("action", NASTY_ACTIONS)
def test_webshop_and_search_qa_nasty_action(webshop, search_qa, action):
    webshop.step(action)
    search_qa.step(action)
