"""Hydra config groups (model, engine, env, algorithm, agent, learner, logger), packaged as `agentforge.conf`."""
