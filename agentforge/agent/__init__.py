"""The agent side of a rollout: prompts, output parsing and the multi-turn AgentLoop."""
