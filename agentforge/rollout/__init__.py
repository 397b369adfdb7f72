"""Rollout: how the episodes of one iteration are produced from tasks (workflows), their metrics, `agentforge rollout`."""
