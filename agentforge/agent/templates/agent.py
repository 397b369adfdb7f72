"""The `agent` env's template: unused for prompts (an external agent writes its own messages and the gateway renders
them with the model's chat template); registered so every env name has one."""

from __future__ import annotations

from agentforge.agent.prompts import PROMPTS, PromptTemplate

AGENT = PROMPTS.register("agent")(PromptTemplate(system="", turn="{observation}", require_think=False))
