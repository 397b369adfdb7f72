"""Rollout: how one iteration's episodes are produced from tasks (workflows and hooks), their metrics, the command."""
