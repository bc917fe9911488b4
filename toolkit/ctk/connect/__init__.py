"""How ctk reaches a Slurm cluster: run its commands, store a script, read a log (see base)."""
