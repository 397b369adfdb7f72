"""A small verifiers environment that runs offline: guess a number from 1 to `high` in `max_turns` guesses, with
"higher"/"lower" answers. Written against the verifiers API (`vf.MultiTurnEnv`, `vf.Rubric`, a `datasets.Dataset`),
as a user's env would be; `env=verifiers` loads it by default (`entry=...verifiers_example:load_environment`)."""

from __future__ import annotations

import random
import re
from typing import Any

NUMBER = re.compile(r"-?\d+")


def load_environment(high: int = 10, max_turns: int = 4, num_train: int = 200, num_eval: int = 50,
                     seed: int = 0) -> Any:
    import verifiers as vf
    from datasets import Dataset

    rng = random.Random(seed)
    prompt = (f"I am thinking of a whole number from 1 to {high}. Guess it: reply with just the number. "
              f"You have {max_turns} guesses; after each I say higher or lower.")
    rows = [{"question": prompt, "answer": str(rng.randint(1, high))} for _ in range(num_train + num_eval)]

    class GuessNumberEnv(vf.MultiTurnEnv):
        async def env_response(self, messages: Any, state: Any, **kwargs: Any) -> Any:
            reply = str(getattr(messages[-1], "content", "") or "")
            found = NUMBER.findall(reply)
            target = int(state["answer"])
            if found and int(found[-1]) == target:
                state["solved"] = True
                final = [vf.UserMessage(content=f"Correct, it was {target}.")]
                state["final_env_response"] = final
                return final
            if not found:
                return [vf.UserMessage(content="That is not a number. Reply with just the number.")]
            guess = int(found[-1])
            hint = "higher" if guess < target else "lower"
            return [vf.UserMessage(content=f"{guess} is wrong: the number is {hint}.")]

    async def solved(state: Any, **kwargs: Any) -> float:
        return 1.0 if state.get("solved") else 0.0

    return GuessNumberEnv(dataset=Dataset.from_list(rows[:num_train]), eval_dataset=Dataset.from_list(rows[num_train:]),
                          rubric=vf.Rubric(funcs=[solved], weights=[1.0]), max_turns=max_turns)
