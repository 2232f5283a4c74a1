"""How many threads a flow call may use: the CPUs this process may run on that are free now.

free = the CPUs of this process's affinity mask (os.sched_getaffinity; fewer if a cgroup CPU quota
says so, as in a container started with --cpus), minus the other runnable
threads on them right now: the kernel's count of runnable threads (/proc/loadavg, 4th field,
which includes the caller) less one, scaled by the share of the machine's CPUs the mask holds
(a process pinned to 2 of 64 CPUs sees about 2/64 of the machine's runnable threads). At least 1,
at most the mask's size. On a machine busy with other work this is 1, and a call runs on the
calling thread: threads that must share cores with busy loops only wait for each other (measured
in benchmarks/flow_speed.py, section "busy").

ATTNFLOW_THREADS=<n> (n >= 1) fixes the count instead; a `threads=` argument of
`layered_max_flow` wins over both. The values never depend on the count.
"""

from __future__ import annotations

import functools
import math
import os
import time

ENV = "ATTNFLOW_THREADS"
# The free-CPU estimate is reused for this long (seconds): reading /proc costs ~10 us, a small
# flow call ~100 us.
REFRESH_S = 0.05
_cache = {"at": -1.0, "free": 1}


def _affinity() -> int:
    try:
        cpus = max(len(os.sched_getaffinity(0)), 1)
    except (AttributeError, OSError):  # not Linux
        cpus = max(os.cpu_count() or 1, 1)
    quota = _cgroup_quota()
    return cpus if quota is None else max(1, min(cpus, quota))


@functools.lru_cache(maxsize=1)
def _cgroup_quota() -> int | None:
    """CPUs allowed by the cgroup v2 quota (/sys/fs/cgroup/cpu.max, "max 100000" = none), rounded
    up; None without a quota."""
    try:
        with open("/sys/fs/cgroup/cpu.max") as fh:
            quota, period = fh.read().split()[:2]
        return None if quota == "max" else math.ceil(int(quota) / int(period))
    except (OSError, ValueError):
        return None


def _runnable_others() -> float | None:
    """Other runnable threads on this process's CPUs now (an estimate), None where unknown."""
    try:
        with open("/proc/loadavg", "rb") as fh:
            running = int(fh.read().split()[3].split(b"/")[0])
    except (OSError, ValueError, IndexError):
        return None
    share = _affinity() / max(os.cpu_count() or 1, 1)
    return max(running - 1, 0) * min(share, 1.0)


def free_cpus() -> int:
    """CPUs of this process's affinity mask not busy with other runnable threads now (>= 1)."""
    now = time.monotonic()
    if now - _cache["at"] < REFRESH_S:
        return _cache["free"]
    cpus = _affinity()
    others = _runnable_others()
    if others is None:
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
        others = load * min(cpus / max(os.cpu_count() or 1, 1), 1.0)
    free = max(1, min(cpus, int(cpus - others + 0.5)))
    _cache["at"], _cache["free"] = now, free
    return free


def flow_threads(threads: int | None = None) -> int:
    """Threads for one flow call: `threads` if given, else ATTNFLOW_THREADS, else `free_cpus()`."""
    if threads is None:
        raw = os.environ.get(ENV, "").strip()
        if not raw:
            return free_cpus()
        try:
            threads = int(raw)
        except ValueError:
            raise ValueError(f"{ENV} must be a whole number >= 1, got {raw!r}") from None
        if threads < 1:
            raise ValueError(f"{ENV} must be a whole number >= 1, got {raw!r}")
        return threads
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be a whole number >= 1, got {threads!r}")
    return threads
