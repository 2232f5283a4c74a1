"""A benchmark names the CPU of each run (``attnflow.stage_cache.cpu_kind``): its ratios depend on it."""

from __future__ import annotations

import pytest

from attnflow.stage_cache import cpu_kind


@pytest.mark.parametrize(
    "flags, vector",
    [
        ("fpu sse sse2 avx avx2 avx512f avx512bw", "AVX512F"),
        ("fpu sse2 avx avx2 fma", "AVX2"),
        ("fpu", "no SIMD flag"),
    ],
)
def test_the_cpu_is_named_with_its_widest_vector_extension(tmp_path, flags, vector):
    info = tmp_path / "cpuinfo"
    info.write_text(f"processor\t: 0\nmodel name\t: Some CPU 9000\nflags\t\t: {flags}\n\nprocessor\t: 1\n")
    assert cpu_kind(info) == f"Some CPU 9000 ({vector})"


def test_a_machine_without_cpuinfo_says_unknown(tmp_path):
    assert cpu_kind(tmp_path / "absent") == "unknown"
