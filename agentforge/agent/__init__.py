"""The agent side of a rollout: how episodes are played, prompt templates and rendering, output parsing."""
