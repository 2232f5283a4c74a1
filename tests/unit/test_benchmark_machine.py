"""benchmarks/flow_speed.py names the CPU of each run: its ratios against scipy depend on it."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def flow_speed():
    pytest.importorskip("scipy")
    spec = importlib.util.spec_from_file_location("flow_speed", ROOT / "benchmarks" / "flow_speed.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    "flags, vector",
    [
        ("fpu sse sse2 avx avx2 avx512f avx512bw", "AVX512F"),
        ("fpu sse2 avx avx2 fma", "AVX2"),
        ("fpu", "no SIMD flag"),
    ],
)
def test_the_cpu_is_named_with_its_widest_vector_extension(flow_speed, tmp_path, flags, vector):
    info = tmp_path / "cpuinfo"
    info.write_text(f"processor\t: 0\nmodel name\t: Some CPU 9000\nflags\t\t: {flags}\n\nprocessor\t: 1\n")
    assert flow_speed.cpu_model(info) == f"Some CPU 9000 ({vector})"


def test_a_machine_without_cpuinfo_says_unknown(flow_speed, tmp_path):
    assert flow_speed.cpu_model(tmp_path / "absent") == "unknown"
