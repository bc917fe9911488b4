"""ctk: Slurm cluster images and jobs for AI/ML training, from Cluster Toolkit blueprints."""

__version__ = "0.1.0"
