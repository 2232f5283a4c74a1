"""The study's tasks by name: one :class:`TaskSpec` each (see :mod:`attnflow.tasks.spec`)."""

from attnflow.tasks.agreement import AGREEMENT
from attnflow.tasks.spec import TaskSpec
from attnflow.tasks.sst2 import SST2

TASKS: dict[str, TaskSpec] = {spec.name: spec for spec in (AGREEMENT, SST2)}


def get_task(name: str) -> TaskSpec:
    """The spec of task ``name``; a ValueError lists the known tasks."""
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; known: {', '.join(TASKS)}")
    return TASKS[name]


__all__ = ["TASKS", "TaskSpec", "get_task"]
