"""Jobs: sbatch templates, submission and following (ctk.jobs.submit -> Job).

The API is imported on first use, so that a module of this package (the scheduler, the
registry) loads without the template engine."""


def __getattr__(name: str):
    if name in ("Job", "submit"):
        from . import api
        return getattr(api, name)
    raise AttributeError(name)


__all__ = ["Job", "submit"]
