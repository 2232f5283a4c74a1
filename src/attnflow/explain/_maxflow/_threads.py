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
`layered_max_flow` wins over both. The values never depend on the count. Either is checked on every
flow call, short or long (`check_env`): 0, a negative or a non-integer value is refused in one line
naming ATTNFLOW_THREADS and the value; a count above the CPUs this process may use (`cpu_limit`:
its affinity mask, bounded by a cgroup quota) is clamped to them with a warning (once per value):
the extension's threads live as long as the process, and more of them than CPUs only wait for
each other.
"""

from __future__ import annotations

import functools
import math
import os
import time
import warnings

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


def cpu_limit() -> int:
    """The most threads a flow call runs: the CPUs this process may run on (>= 1)."""
    return _affinity()


_warned: set[tuple[str, int]] = set()


def _bounded(threads: int, name: str) -> int:
    """`threads` clamped to `cpu_limit()`, with a warning the first time a value is clamped."""
    limit = cpu_limit()
    if threads <= limit:
        return threads
    if (name, threads) not in _warned:
        _warned.add((name, threads))
        warnings.warn(
            f"{name}={threads} is more than the {limit} CPUs this process may use; using {limit} threads",
            RuntimeWarning,
            stacklevel=3,
        )
    return limit


@functools.lru_cache(maxsize=8)
def _parse_env(raw: str) -> int | None:
    """ATTNFLOW_THREADS as given (stripped) -> the count, None when unset; ValueError naming it."""
    if not raw:
        return None
    try:
        threads = int(raw)
    except ValueError:
        raise ValueError(f"{ENV} must be a whole number >= 1, got {raw!r}") from None
    if threads < 1:
        raise ValueError(f"{ENV} must be a whole number >= 1, got {raw!r}")
    return threads


def check_env() -> int | None:
    """ATTNFLOW_THREADS checked (a bad value raises, also on calls too small to use threads) and
    bounded by `cpu_limit()`; None when it is not set."""
    threads = _parse_env(os.environ.get(ENV, "").strip())
    return None if threads is None else _bounded(threads, ENV)


def flow_threads(threads: int | None = None) -> int:
    """Threads for one flow call: `threads` if given, else ATTNFLOW_THREADS, else `free_cpus()`;
    at most `cpu_limit()` (see the module docstring)."""
    if threads is None:
        fixed = check_env()
        return free_cpus() if fixed is None else fixed
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be a whole number >= 1, got {threads!r}")
    check_env()
    return _bounded(threads, "threads")
