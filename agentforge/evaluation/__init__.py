"""Evaluation: `agentforge eval` (success, diversity, decoding baselines, ALFWorld interventions) and sweep reports."""
