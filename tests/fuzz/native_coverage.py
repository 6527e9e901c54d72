"""Line and branch coverage of _native.c reached by a fuzzing corpus (gcov).

libFuzzer's ``cov:`` counts edges of the C code and of the instrumented
Python together, sanitizer checks included; this answers the plainer
question of which lines of the C source a corpus runs. It builds the
extension with ``gcc --coverage`` (no sanitizers), runs every input of the
given corpus folders and of the seed corpus through the fuzz target's
``one_input`` in a child process, and prints gcov's summary for the C file:

    .venv/bin/python tests/fuzz/native_coverage.py /tmp/omni-corpus
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE.parent.parent / "src/omni_grpc/convert/_native.c"


def child(corpora: list[str]) -> None:
    sys.path.insert(0, str(HERE))
    import native_fuzz  # loads OMNI_FUZZ_EXTENSION

    inputs = [p for c in corpora for p in sorted(Path(c).iterdir()) if p.is_file()]
    for path in inputs:
        native_fuzz.one_input(path.read_bytes())
    print(f"{len(inputs)} inputs run")


def main(corpora: list[str]) -> int:
    with tempfile.TemporaryDirectory(prefix="omni-native-gcov-") as tmp:
        target = Path(tmp, "_codec" + (sysconfig.get_config_var("EXT_SUFFIX") or ".so"))
        include = sysconfig.get_paths()["include"]
        object_file = Path(tmp, "_native.o")
        subprocess.run(
            ["gcc", "-O0", "--coverage", "-fPIC", "-c", f"-I{include}", str(SOURCE),
             "-o", str(object_file)],
            check=True,
        )  # fmt: skip
        subprocess.run(
            ["gcc", "--coverage", "-shared", str(object_file), "-o", str(target)], check=True
        )
        sys.path.insert(0, str(HERE))
        import asan_fuzz

        seeds = Path(tmp, "seeds")
        asan_fuzz.write_seeds(seeds)
        env = {**os.environ, "OMNI_FUZZ_EXTENSION": str(target)}
        env.pop("OMNI_GRPC_NATIVE", None)
        subprocess.run(
            [sys.executable, __file__, "--child", str(seeds), *corpora], env=env, check=True
        )  # the counters are written when the child exits
        report = subprocess.run(
            ["gcov", "-b", "-n", "-o", tmp, str(SOURCE)],
            cwd=tmp, capture_output=True, text=True, check=True,
        )  # fmt: skip
        # A block per file, headers too: the C file's is the one wanted.
        mine = False
        for line in report.stdout.splitlines():
            if line.startswith("File "):
                mine = line.endswith(f"/{SOURCE.name}'")
            if mine and line.strip():
                print(line)
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2:])
        sys.exit(0)
    sys.exit(main(sys.argv[1:]))
