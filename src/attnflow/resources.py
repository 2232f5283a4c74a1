"""What one call costs: its wall-clock seconds and its peak memory, on the CPU or a CUDA device.

On the CPU the peak is the resident set's largest growth during the call, polled on a thread every
2 ms (`Peak`); on CUDA it is the device's peak allocation above what was held before the call.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["PAGE", "Peak", "measured", "rss"]

T = TypeVar("T")
PAGE = os.sysconf("SC_PAGE_SIZE")
POLL_S = 0.002


def rss() -> int:
    """This process's resident set, in bytes (Linux: /proc/self/statm)."""
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * PAGE


class Peak:
    """The largest resident set while the block runs, polled on a thread: ``seconds``, ``peak``,
    ``base`` (before) and ``extra`` (peak − base) once the block has ended."""

    def __enter__(self) -> Peak:
        import gc

        gc.collect()
        self.base = self.peak = rss()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()
        self.t0 = time.perf_counter()
        return self

    def _poll(self) -> None:
        while not self._stop.wait(POLL_S):
            self.peak = max(self.peak, rss())

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self.t0
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss())
        self.extra = self.peak - self.base


def measured(device: Any, call: Callable[[], T]) -> tuple[T | None, float | None, int | None]:
    """(``call()``, seconds, peak bytes above the start) on ``device`` ("cpu", "cuda", ...); a call
    that runs out of memory (a device's, or the host's: an allocation refused, e.g. under a limit
    on the address space) gives (None, None, None)."""
    import torch

    cuda = str(device).startswith("cuda")
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        held = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
    try:
        with Peak() as peak:
            got = call()
            if cuda:
                torch.cuda.synchronize()
    except (torch.OutOfMemoryError, MemoryError):
        return None, None, None
    except RuntimeError as exc:  # the CPU allocator's refusal is a plain RuntimeError
        if "can't allocate memory" not in str(exc) and "not enough memory" not in str(exc):
            raise
        return None, None, None
    extra = torch.cuda.max_memory_allocated() - held if cuda else peak.extra
    return got, peak.seconds, int(extra)
