"""Jobs: sbatch templates, submission and following (ctk.jobs.submit -> Job)."""

from .api import Job, submit

__all__ = ["Job", "submit"]
