"""Slurm launches: an sbatch script that builds a Ray cluster over the job's nodes (`agentforge.cluster`) and runs
the trainer as its driver."""
