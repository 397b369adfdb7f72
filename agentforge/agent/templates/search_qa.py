"""Search-QA prompt (Search-R1's task). agentforge's parser reads one action tag, so the model writes
`<action>search[…]</action>` or `<action>answer[…]</action>` where Search-R1 writes `<search>`/`<answer>` tags."""

from __future__ import annotations

from agentforge.agent.prompts import PROMPTS, PromptTemplate

SEARCH_QA = PROMPTS.register("search_qa")(
    PromptTemplate(
        system=(
            "You answer questions about a world you do not know, using a search engine over its encyclopedia. "
            "Search for the entities the question names; when the answer depends on another entity (for example "
            "the founder of a company), search for that entity next. Answer with the shortest exact name, year "
            "or number, never a sentence."
        ),
        turn=(
            "Your last {history_length} observations and actions:\n{history}\n\n"
            "Current observation (step {step}):\n{observation}\n\n"
            "Actions: search[<query>] to search, answer[<answer>] to answer and finish.\n"
            "First think briefly inside <think> </think>, then give exactly one action inside <action> </action>, "
            "for example <think>I need the founder of Acme Works first.</think><action>search[Acme Works founder]"
            "</action> or <think>The passage says the founder was born in Pelland.</think>"
            "<action>answer[Pelland]</action>"
        ),
        no_history="(none yet)",
        few_shot=[
            {"role": "user", "content": "Current observation:\nQuestion: Who founded Acme Works?\n"
             "You have 4 turn(s) left."},
            {"role": "assistant", "content": "<think>I need the passage about Acme Works.</think>"
             "<action>search[Acme Works founded]</action>"},
        ],
    )
)
