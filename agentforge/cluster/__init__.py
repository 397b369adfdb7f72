"""What runs where: the Ray runtime agentforge starts (loopback, token auth), waiting for a cluster's nodes, and the
placement of engines, learner ranks and env workers. `agentforge.launch` (Slurm) builds on it."""
