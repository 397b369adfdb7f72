"""WebShop prompt. On the search page the env gives no admissible list (the query is free text), so the template
names the search action there instead of listing clicks."""

from __future__ import annotations

from dataclasses import dataclass, replace

from agentforge.agent.prompts import PROMPTS, HistoryEntry, PreparedTurn, PromptTemplate, StrategyPrompt
from agentforge.types import Observation

SEARCH_ACTION_HINT = "search[<your query>]"


@dataclass(frozen=True)
class FreeTextActionTemplate(PromptTemplate):
    """A template whose env sends `admissible=None` where any text is allowed; it shows `free_text_hint` then."""

    free_text_hint: str = SEARCH_ACTION_HINT

    def prepare(self, observation: Observation, history: list[HistoryEntry], intro: str | None) -> PreparedTurn:
        if observation.admissible is None:
            observation = replace(observation, admissible=[self.free_text_hint])
        return PreparedTurn(observation, history)


WEBSHOP = PROMPTS.register("webshop")(
    FreeTextActionTemplate(
        strategy=StrategyPrompt(
            guidance="the search keywords taken from the instruction, how you will choose among the results (the "
            "attributes and the price limit), which options to click, and when to buy.",
            example="Search for the product type with its key attributes. Open the first result that matches them and "
            "costs less than the limit, click the colour and size asked for, then click buy now.",
        ),
        system=(
            "You are an expert online shopper in WebShop. Each page is shown as text with parts separated by "
            "[SEP]. Find the product the instruction asks for and buy it: search with keywords from the "
            "instruction, open a promising product by clicking its ID, click each option the instruction asks for "
            "(colour, size, flavour ...), check the price is under the limit, then click buy now. "
            "Actions: search[<keywords>] on the search page, click[<button, product id or option>] elsewhere."
        ),
        turn=(
            "You have taken {steps_taken} step(s). Your last {history_length} observations and actions:\n{history}\n\n"
            "Current observation (step {step}):\n{observation}\n\n"
            "Admissible actions: {admissible}.\n"
            "First think briefly inside <think> </think>, then give exactly one action inside <action> </action>, "
            "for example <think>This product matches the instruction.</think><action>click[buy now]</action>"
        ),
        think_only=(
            "The action for this step is already chosen: {action}. Explain briefly inside <think> </think> why "
            "it moves toward buying the product the instruction asks for; write only the reasoning and stop after "
            "</think>."
        ),
        few_shot=[
            {
                "role": "user",
                "content": "Current observation:\nWebShop [SEP] Instruction: [SEP] i need a gluten free dark "
                "chocolate bar, and price lower than 20.00 dollars [SEP] Search\nAdmissible actions: "
                "search[<your query>].",
            },
            {"role": "assistant", "content": "<think>I search for the product with its key attributes.</think>"
             "<action>search[gluten free dark chocolate bar]</action>"},
        ],
    )
)
