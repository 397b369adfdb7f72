"""What a run leaves behind while it runs: metrics files and wandb, progress on the console, plots."""
