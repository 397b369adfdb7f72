"""Prompts of the library adapters (agentforge.envs.adapters): gym, gem, textarena, reasoning_gym, verifiers.

The libraries' observations are their own text; the templates only frame them. GEM states the task in the first
observation only (later ones answer the last move), so its template repeats that first observation (`intro`) in
every turn. TextArena's default wrappers already put the whole game log in each observation, so its recipes run
without a history window. Actions go inside <action> </action>; the adapter hands the text to the library in the
form its parser reads (GEM `\\boxed{...}`, TextArena `[...]`, `env.action_format`).
"""

from __future__ import annotations

from dataclasses import dataclass

from agentforge.agent.prompts import PROMPTS, HistoryEntry, PreparedTurn, PromptTemplate
from agentforge.types import Observation

THINK_THEN_ACT = ("First think briefly inside <think> </think>, then give exactly one action inside "
                  "<action> </action>")


@dataclass(frozen=True)
class IntroTemplate(PromptTemplate):
    """Repeats the episode's first observation (the task) above the turn, once it has scrolled into history."""

    def prepare(self, observation: Observation, history: list[HistoryEntry], intro: str | None) -> PreparedTurn:
        shown = {h.observation for h in history} | {observation.text}
        prefix = f"Task:\n{intro}\n\n" if intro and intro not in shown else ""
        return PreparedTurn(observation, history, prefix=prefix)


GYM = PROMPTS.register("gym")(PromptTemplate(
    system=("You play a grid or card game from Gymnasium shown as text. On FrozenLake you are P on a frozen lake: "
            "S is the start, F frozen (safe), H a hole (falling in ends the game), G the goal. Reach G."),
    turn=("You have taken {steps_taken} step(s). Your last {history_length} observations and actions:\n{history}\n\n"
          "Current observation (step {step}):\n{observation}\n\nAdmissible actions: {admissible}.\n"
          f"{THINK_THEN_ACT}, for example <think>The goal is below me.</think><action>down</action>"),
    few_shot=[{"role": "user", "content": "Current observation:\nSFFF\nFHPH\nFFFH\nHFFG\n"
               "Admissible actions: left, down, right, up."},
              {"role": "assistant", "content": "<think>Below me is frozen and leads toward G.</think>"
               "<action>down</action>"}],
))

GEM = PROMPTS.register("gem")(IntroTemplate(
    system="You play a text game. Read the rules, then make one move per turn.",
    turn=("Your last {history_length} moves and the game's answers:\n{history}\n\n"
          "Game (step {step}):\n{observation}\n\n"
          f"{THINK_THEN_ACT}; write only the move itself, for example <think>The number is higher than 5."
          "</think><action>7</action>"),
    history_item="[Game {index}]\n{observation}\n[Your move {index}] {action}",
    few_shot=[{"role": "user", "content": "Guess the number between 1 and 10. At turn 1, you guessed 5, and the "
               "target number is higher than 5."},
              {"role": "assistant", "content": "<think>Higher than 5: try the middle of 6-10.</think>"
               "<action>8</action>"}],
))

TEXTARENA = PROMPTS.register("textarena")(PromptTemplate(
    system="You play a game from TextArena. The game log shows the rules and every move so far.",
    turn=("Game log (step {step}):\n{observation}\n\n"
          f"{THINK_THEN_ACT}; write only the move itself, without brackets, for example <think>The target is "
          "higher than 10.</think><action>15</action>"),
    few_shot=[{"role": "user", "content": "[GAME] Guess the number between 1 and 20.\n[Player] [10]\n"
               "[GAME] The target number is higher."},
              {"role": "assistant", "content": "<think>Higher than 10: try 15.</think><action>15</action>"}],
))

REASONING_GYM = PROMPTS.register("reasoning_gym")(PromptTemplate(
    system="You solve reasoning problems. Give the final answer only, in the form the question asks for.",
    turn=("Problem:\n{observation}\n\nFirst think briefly inside <think> </think>, then give the final answer "
          "inside <action> </action>, for example <think>2 + 3 is 5.</think><action>5</action>"),
    few_shot=[{"role": "user", "content": "Problem:\nCalculate 4 + 3."},
              {"role": "assistant", "content": "<think>4 + 3 = 7.</think><action>7</action>"}],
))

VERIFIERS = PROMPTS.register("verifiers")(IntroTemplate(
    system="You solve a task in a conversation with an environment. Read the task, then reply one turn at a time.",
    turn=("Your last {history_length} replies and the environment's answers:\n{history}\n\n"
          "Environment (step {step}):\n{observation}\n\n"
          f"{THINK_THEN_ACT}; the action is your reply to the environment, for example <think>It said higher "
          "than 5.</think><action>7</action>"),
    history_item="[Environment {index}]\n{observation}\n[Your reply {index}] {action}",
    few_shot=[{"role": "user", "content": "Guess a number from 1 to 10. 5 is wrong: the number is higher."},
              {"role": "assistant", "content": "<think>Higher than 5: try 8.</think><action>8</action>"}],
))
