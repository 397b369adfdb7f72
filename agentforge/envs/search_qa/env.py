"""Search QA: answer a question by searching a local corpus (BM25), as in Search-R1, in agentforge's action format.

Actions: `search[<query>]` shows the top-k passages (Search-R1's `Doc i(Title: …) …` inside
`<information>…</information>`); `answer[<text>]` ends the episode with reward 1 on an exact match (normalised:
lowercase, no punctuation or articles) with a golden answer, else 0. The episode also ends, unpaid, after
`max_turns` actions. Any other text is an invalid no-op that costs a turn (`info["invalid_action"]`, and
`info["executable"]` False).
Search-R1 writes `<search>…</search>` / `<answer>…</answer>`; agentforge's parser reads one action tag, so here the
model writes `<action>search[…]</action>` or `<action>answer[…]</action>`, and `admissible` is always None.

The anchor (GiGPO's state key) is the question plus the ids of the passages last shown: two rollouts that reached
the same evidence are in the same state whatever words their queries used. The observation text also says how
many turns are left; that is not part of the anchor.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

from agentforge.envs.base import ENVS, EXECUTABLE, echo
from agentforge.envs.search_qa.answer import exact_match
from agentforge.envs.search_qa.data import Corpus, Passage, Question, load_corpus, load_questions
from agentforge.errors import ConfigError
from agentforge.tasks import SPLIT_SEED_BASE
from agentforge.types import Observation, StepResult, Task

_ACTION = re.compile(r"^\s*(search|answer)\s*\[(.*)\]\s*$", re.IGNORECASE | re.DOTALL)
ACTION_HELP = "write search[<query>] to search or answer[<answer>] to answer"


def parse_action(action: str) -> tuple[str, str] | None:
    """`search[x]` → ("search", "x"), `answer[y]` → ("answer", "y"); None for anything else."""
    match = _ACTION.match(action) if isinstance(action, str) else None
    if match is None:
        return None
    # casefold, not lower: `ſearch` matches the pattern (IGNORECASE) but lowers to itself, and was read as an answer
    return match.group(1).casefold(), " ".join(match.group(2).split())


def question_key(question: str) -> str:
    """A question as a task key holds it: casefolded, whitespace collapsed (the same question typed twice)."""
    return " ".join(question.casefold().split())


@ENVS.register("search_qa")
class SearchQAEnv:
    """Answer the question; search the corpus first. Deterministic given the task and the actions."""

    # the SFT warm start's expert (`envs.base.expert_for`): a path, so this module does not import it
    expert: ClassVar[str] = "agentforge.envs.search_qa.expert:expert_actions"

    option_help: ClassVar[dict[str, str]] = {
        'data_dir': 'corpus and questions folder (null: the bundled set)',
        'top_k': 'passages per search',
        'max_turns': 'actions before the episode ends unpaid',
        'corpus_file': 'the corpus file inside data_dir',
    }

    def __init__(
        self, data_dir: str | None = None, top_k: int = 3, max_turns: int = 4, corpus_file: str = "corpus.jsonl"
    ) -> None:
        if top_k < 1:
            raise ConfigError(f"search_qa top_k must be >= 1, got {top_k}")
        if max_turns < 1:
            raise ConfigError(f"search_qa max_turns must be >= 1, got {max_turns}")
        self.data_dir = data_dir
        self.top_k = top_k
        self.max_turns = max_turns
        self.corpus: Corpus = load_corpus(data_dir, corpus_file)
        self._questions: dict[str, list[Question]] = {}  # split -> its questions (the process-wide lists)
        self._question: Question | None = None
        self.turns_taken = 0
        self.done = False
        self.retrieved: list[Passage] = []

    # -- episode -------------------------------------------------------------------------------------------------
    def reset(self, task: Task) -> Observation:
        return self.reset_to_question(self._question_for(task))

    def task_key(self, task: Task) -> str:
        """The task's content (agentforge/envs/task_keys.py): its question, case and whitespace normalised, so a
        question a dataset repeats (in a split, or across splits: real QA sets do) is one task whatever its row."""
        return "search_qa:" + question_key(self._question_for(task).question)

    def _question_for(self, task: Task) -> Question:
        if task.split not in SPLIT_SEED_BASE:
            raise ConfigError(f"unknown split {task.split!r} for search_qa; valid splits: {', '.join(SPLIT_SEED_BASE)}")
        if task.split not in self._questions:  # the shared cache resolves the folder on every call: ~0.5 ms
            self._questions[task.split] = load_questions(task.split, self.data_dir)
        questions = self._questions[task.split]
        return questions[(task.seed - SPLIT_SEED_BASE[task.split]) % len(questions)]

    def reset_to_question(self, question: Question) -> Observation:
        """Start an episode on a given question (tests, hand-made tasks)."""
        self._question = question
        self.turns_taken = 0
        self.done = False
        self.retrieved = []
        return self._observation(f"Question: {question.question}\n{self._turns_left()}")

    def step(self, action: str) -> StepResult:
        question = self.question
        if self.done:
            raise RuntimeError("this search_qa episode is over (done=True); call reset() before stepping again")
        self.turns_taken += 1
        parsed = parse_action(action)
        info: dict[str, Any] = {"turns": self.turns_taken, "question_id": question.id, "invalid_action": False,
                                EXECUTABLE: True}
        reward, won = 0.0, False
        if parsed is None or not parsed[1]:
            info.update({"invalid_action": True, EXECUTABLE: False,
                         "error": f"{echo(repr(action))} is not an action; {ACTION_HELP}"})
            text = f"Question: {question.question}\nInvalid action: {ACTION_HELP}."
        elif parsed[0] == "search":
            self.retrieved = self.corpus.search(parsed[1], self.top_k)
            info.update(action="search", query=parsed[1], retrieved_ids=[p.id for p in self.retrieved])
            found = "\n".join(p.render(i) for i, p in enumerate(self.retrieved, start=1))
            text = (f"Question: {question.question}\n<information>\n{found or 'No passage matches this query.'}\n"
                    "</information>")
        else:
            won = exact_match(parsed[1], question.golden_answers)
            reward = 1.0 if won else 0.0
            self.done = True
            info.update(action="answer", answer=parsed[1], golden_answers=list(question.golden_answers),
                        em=won, task_score=reward)
            text = f"Question: {question.question}\nYour answer: {echo(parsed[1])}"
        if not self.done and self.turns_taken >= self.max_turns:
            self.done = True
            info.update(truncated=True, em=False, task_score=0.0)
        if not self.done:
            text += f"\n{self._turns_left()}"
        return StepResult(self._observation(text), reward, self.done, won, info)

    def close(self) -> None:
        self._question = None

    @property
    def question(self) -> Question:
        if self._question is None:
            raise RuntimeError("the search_qa env has no episode; call reset(task) first")
        return self._question

    def _turns_left(self) -> str:
        left = self.max_turns - self.turns_taken
        return f"You have {left} turn(s) left." + (" Answer now." if left == 1 else "")

    def _observation(self, text: str) -> Observation:
        ids = ",".join(p.id for p in self.retrieved)
        anchor = f"{self.question.question} || retrieved: {ids}" if ids else self.question.question
        return Observation(text=text, anchor=anchor, admissible=None)
