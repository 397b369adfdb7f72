"""Search-QA prompt (Search-R1's task and format): `<search>query</search>` or `<answer>text</answer>` after
`<think>…</think>`; the parser turns them into the env's `search[query]` / `answer[text]` actions."""

from __future__ import annotations

from agentforge.agent.prompts import PROMPTS, PromptTemplate, StrategyPrompt

SEARCH_QA = PROMPTS.register("search_qa")(
    PromptTemplate(
        strategy=StrategyPrompt(
            guidance="which entities to search for and in which order (for a question about a related entity, find "
            "that entity first), and when you know enough to answer.",
            example="First search for the company to learn who founded it, then search for that founder's birthplace "
            "and answer with the place name only.",
        ),
        system=(
            "You answer questions about a world you do not know, using a search engine over its encyclopedia. "
            "Search for the entities the question names; when the answer depends on another entity (for example "
            "the founder of a company), search for that entity next. Answer with the shortest exact name, year "
            "or number, never a sentence."
        ),
        turn=(
            "Your last {history_length} observations and actions:\n{history}\n\n"
            "Current observation (step {step}):\n{observation}\n\n"
            "First think briefly inside <think> </think>, then either search with <search>query</search> or answer "
            "and finish with <answer>answer</answer>, for example <think>I need the founder of Acme Works first."
            "</think><search>Acme Works founder</search> or <think>The passage says the founder was born in "
            "Pelland.</think><answer>Pelland</answer>"
        ),
        no_history="(none yet)",
        action_tag="search|answer",
        few_shot=[
            {"role": "user", "content": "Current observation:\nQuestion: Who founded Acme Works?\n"
             "You have 4 turn(s) left."},
            {"role": "assistant", "content": "<think>I need the passage about Acme Works.</think>"
             "<search>Acme Works founded</search>"},
        ],
    )
)
