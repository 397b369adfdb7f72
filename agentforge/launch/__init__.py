"""Scale-out: the Ray runtime agentforge starts (loopback, token auth), Slurm launches (an sbatch script that builds a
Ray cluster over the job's nodes and runs the trainer as its driver), and where work landed in a run."""
