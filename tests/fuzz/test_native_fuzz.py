"""The native codec fuzzed under AddressSanitizer, coverage-guided (atheris +
libFuzzer, see asan_fuzz.py and native_fuzz.py), for a bounded number of runs
with a fixed seed: no sanitizer report, no native/Python disagreement.

Two more sessions run a copy built with planted faults (plant.h): the
session must find each one from the seeds, which do not contain it. That is
what shows the first session's silence means something.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from . import asan_fuzz

RUNS = 3_500
FLAGS = ["-seed=1", "-max_len=4096", "-print_final_stats=1"]
# The planted faults are found in under 1,000 runs from these seeds; the bound
# only keeps a broken harness from running long.
PLANTED_RUNS = 20_000


@pytest.fixture(scope="module")
def seeds(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The seed corpus, and its dictionary beside it as ``omni.dict``."""
    why = asan_fuzz.missing_toolchain()
    if why is not None:
        if os.environ.get("OMNI_REQUIRE_TOOLCHAINS") == "1":
            pytest.fail(f"the ASan fuzzing of the native codec cannot run: {why}")
        pytest.skip(why)
    into = tmp_path_factory.mktemp("seeds")
    assert asan_fuzz.write_seeds(into) > 500
    asan_fuzz.write_dictionary(into.parent / "omni.dict")
    return into


def session(
    tmp_path: Path, seeds: Path, runs: int, *, plant: str | None = None
) -> tuple[int, str, str]:
    extension = asan_fuzz.build(tmp_path / "build", planted=plant is not None)
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    flags = [f"-runs={runs}", *FLAGS, f"-dict={seeds.parent / 'omni.dict'}"]
    flags.append(f"-artifact_prefix={tmp_path}/")
    if plant is None:
        flags.append("-print_coverage=1")
    done = asan_fuzz.run(extension, [*flags, str(corpus)], seeds, plant=plant)
    return done.returncode, done.stdout, done.stderr


def native_edges(report: str) -> tuple[int, int]:
    """Edges of the native source covered while fuzzing, and all its edges."""
    covered = total = 0
    for match in re.finditer(r"COVERED_FUNC: hits: \d+ edges: (\d+)/(\d+) \S+ (\S+):\d+", report):
        if Path(match.group(3)).name == asan_fuzz.SOURCE.name:
            covered += int(match.group(1))
            total += int(match.group(2))
    return covered, total


def test_a_bounded_asan_session_finds_nothing(tmp_path: Path, seeds: Path) -> None:
    code, out, err = session(tmp_path, seeds, RUNS)
    report = (out + err)[-6000:]
    assert code == 0, report
    assert f"Done {RUNS} runs" in err, report
    assert "ERROR: AddressSanitizer" not in err, report
    assert not list(tmp_path.glob("crash-*")), report
    # The instrumented C code was loaded and reached while fuzzing, not only
    # at import: a harness that stopped reaching it would cover nothing there.
    covered, total = native_edges(err)
    assert total > 0, "no coverage of the native source was reported:\n" + report
    assert covered >= 0.2 * total, f"only {covered}/{total} native edges covered\n{report}"


def test_the_session_finds_a_planted_out_of_bounds_read(tmp_path: Path, seeds: Path) -> None:
    code, out, err = session(tmp_path, seeds, PLANTED_RUNS, plant="oob")
    report = (out + err)[-6000:]
    assert code != 0, report
    assert "ERROR: AddressSanitizer: heap-buffer-overflow" in err, report
    assert "plant_overflow" in err, report  # ASan names the planted read
    assert list(tmp_path.glob("crash-*")), report


def test_the_session_finds_a_planted_divergence(tmp_path: Path, seeds: Path) -> None:
    code, out, err = session(tmp_path, seeds, PLANTED_RUNS, plant="diverge")
    report = (out + err)[-6000:]
    assert code != 0, report
    assert "native and Python codecs differ" in out, report
    assert "DIV?" in out and "DIV!" in out, report  # the native side said DIV?
    assert list(tmp_path.glob("crash-*")), report


REGRESSIONS = Path(__file__).with_name("native_regressions")


def test_a_19_digit_integer_in_a_line_is_no_undefined_behaviour(
    tmp_path: Path, seeds: Path
) -> None:
    # Found by a 25-minute session (seed 11): scan_int multiplied in a 19th
    # digit before its length check (signed overflow, which UBSan traps). The
    # line is a conformance line with one value made 19 digits long.
    extension = asan_fuzz.build(tmp_path / "build")
    done = asan_fuzz.run(extension, [str(REGRESSIONS / "scan-int-19-digits")], seeds)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
