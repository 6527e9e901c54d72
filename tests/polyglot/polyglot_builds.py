"""Builds the Go, Java, Node and browser examples once per source state.

Each build lands in ``.cache/polyglot/<lang>-<hash>``, where the hash covers
every input (example sources, generated stubs, lock files, tool versions), so
a warm run reuses it and any edit rebuilds. In CI (``OMNI_REQUIRE_TOOLCHAINS=1``)
a missing toolchain fails the test; locally it skips with the reason.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".cache" / "polyglot"
EXAMPLES = ROOT / "examples"
GENERATED = ROOT / "generated"
GOCODE = Path("/usr/share/gocode/src")
JAVA_JARS = Path("/usr/share/java")

# Seconds each build took in this session (0.0 when it came from the cache).
BUILD_TIMES: dict[str, float] = {}


def missing_toolchain(what: str) -> None:
    """Fails in CI, skips elsewhere, always naming what to install."""
    message = f"{what} (scripts/setup installs it as root)"
    if os.environ.get("OMNI_REQUIRE_TOOLCHAINS") == "1":
        pytest.fail(f"required toolchain missing: {message}", pytrace=False)
    pytest.skip(f"toolchain missing: {message}")


def _files(*roots: Path, exclude: Iterable[str] = ()) -> list[Path]:
    skip = set(exclude)
    found: list[Path] = []
    for root in roots:
        for path in sorted(root.rglob("*")):
            rel = path.relative_to(root).parts
            if path.is_file() and not skip.intersection(rel):
                found.append(path)
    return found


def _hash(files: Iterable[Path], *extra: str) -> str:
    digest = hashlib.sha256()
    for path in files:
        digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    for item in extra:
        digest.update(item.encode() + b"\0")
    return digest.hexdigest()[:16]


def _version(*cmd: str) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    return done.stdout + done.stderr


def _cached_build(lang: str, key: str, build: Callable[[Path], None]) -> Path:
    """Runs ``build(tmp_dir)`` unless a finished build for ``key`` exists."""
    CACHE.mkdir(parents=True, exist_ok=True)
    (CACHE.parent / ".gitignore").write_text("*\n")
    out = CACHE / f"{lang}-{key}"
    if (out / ".complete").exists():
        BUILD_TIMES.setdefault(lang, 0.0)
        return out
    for stale in CACHE.glob(f"{lang}-*"):
        shutil.rmtree(stale, ignore_errors=True)
    work = Path(tempfile.mkdtemp(prefix=f"{lang}-", dir=CACHE))
    started = time.perf_counter()
    try:
        build(work)
    except subprocess.CalledProcessError as exc:
        shutil.rmtree(work, ignore_errors=True)
        pytest.fail(f"{lang} build failed:\n{exc.stdout}\n{exc.stderr}", pytrace=False)
    BUILD_TIMES[lang] = time.perf_counter() - started
    (work / ".complete").touch()
    work.rename(out)
    return out


def _run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> None:
    subprocess.run(cmd, cwd=cwd, env=env, check=True, capture_output=True, text=True)


@dataclass(frozen=True)
class GoBuild:
    client: Path
    server: Path
    edit: Path


@functools.cache
def build_go() -> GoBuild:
    go = shutil.which("go")
    if go is None or not (GOCODE / "google.golang.org/grpc").is_dir():
        missing_toolchain("Go with Debian's golang-google-grpc-dev")
    src = EXAMPLES / "go"
    key = _hash(_files(src, GENERATED / "go", exclude=["vendor"]), _version("go", "version"))
    env = {
        **os.environ,
        "GOFLAGS": "-mod=vendor",
        "GOPROXY": "off",
        # A persistent build cache makes rebuilds after small edits fast.
        "GOCACHE": str(CACHE / "gocache"),
    }

    def build(out: Path) -> None:
        _run([str(src / "vendor.sh")], src)
        for name in ("omni-client", "omni-server", "omni-edit"):
            _run(["go", "build", "-o", str(out / name), f"./cmd/{name}"], src, env)

    out = _cached_build("go", key, build)
    return GoBuild(client=out / "omni-client", server=out / "omni-server", edit=out / "omni-edit")


@functools.cache
def build_java() -> list[str]:
    """The command prefix that runs ``io.omnigrpc.examples.OmniClient``."""
    if shutil.which("javac") is None or not (JAVA_JARS / "grpc-netty.jar").exists():
        missing_toolchain("a JDK (javac) with Debian's libgrpc-java and libnetty-java")
    src = EXAMPLES / "java"
    key = _hash(_files(src, GENERATED / "java", exclude=["build"]), _version("javac", "-version"))
    out = _cached_build("java", key, lambda out: _run([str(src / "build.sh"), str(out)], src))
    # build.sh wrote the classpath for its (temporary) output dir: swap in ours.
    jars = (out / "classpath").read_text().strip().split(":")[1:]
    classpath = ":".join([str(out / "classes"), *jars])
    return ["java", "-cp", classpath, "io.omnigrpc.examples.OmniClient"]


@functools.cache
def build_node() -> list[str]:
    """The command prefix that runs the compiled ``client.js``."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        missing_toolchain("Node.js and npm")
    src = EXAMPLES / "node"
    key = _hash(
        [
            *_files(src / "src", GENERATED / "ts"),
            *(src / name for name in ("package.json", "package-lock.json", "tsconfig.json")),
        ],
        _version("node", "--version"),
    )
    out = _cached_build("node", key, lambda out: _run([str(src / "build.sh"), str(out)], src))
    return ["node", str(out / "dist" / "client.js")]


@functools.cache
def build_browser() -> Path:
    """The browser example's built page: a directory holding index.html and app.js."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        missing_toolchain("Node.js and npm")
    src = EXAMPLES / "browser"
    key = _hash(
        [
            # src/gen links to generated/ts, hashed once under its own name.
            *_files(src / "src", GENERATED / "ts", exclude=["gen"]),
            *(
                src / name
                for name in ("build.sh", "index.html", "package.json", "package-lock.json")
            ),
            src / "tsconfig.json",
        ],
        _version("node", "--version"),
    )
    return _cached_build("browser", key, lambda out: _run([str(src / "build.sh"), str(out)], src))


# Readers built from the generated stubs and the protobuf runtime alone (no
# example helper code), as a third party would write them: what a default
# .binpb looks like to a reader that knows nothing of this project's framing.
STUBONLY = Path(__file__).parent / "stubonly"


@functools.cache
def build_stubonly_go() -> Path:
    go = shutil.which("go")
    if go is None or not (GOCODE / "google.golang.org/grpc").is_dir():
        missing_toolchain("Go with Debian's golang-google-grpc-dev")
    key = _hash([STUBONLY / "reader.go", *_files(GENERATED / "go")], _version("go", "version"))
    env = {
        **os.environ,
        "GOFLAGS": "-mod=vendor",
        "GOPROXY": "off",
        "GOCACHE": str(CACHE / "gocache"),
    }

    def build(out: Path) -> None:
        # The same offline vendoring as examples/go/vendor.sh, for a module
        # of its own: Debian's Go packages and the generated stubs, linked.
        mod = out / "mod"
        vendor = mod / "vendor"
        (vendor / "github.com/omni-grpc/omni-grpc/generated").mkdir(parents=True)
        for pkg in (
            "google.golang.org/grpc",
            "google.golang.org/protobuf",
            "google.golang.org/genproto",
            "github.com/golang/protobuf",
            "golang.org/x/net",
            "golang.org/x/sys",
            "golang.org/x/text",
        ):
            (vendor / pkg).parent.mkdir(parents=True, exist_ok=True)
            (vendor / pkg).symlink_to(GOCODE / pkg)
        (vendor / "github.com/omni-grpc/omni-grpc/generated/go").symlink_to(GENERATED / "go")
        generated = "github.com/omni-grpc/omni-grpc/generated/go"
        (mod / "go.mod").write_text(
            "module stubonly\n\ngo 1.19\n\nrequire (\n"
            f"\t{generated} v0.0.0\n\tgoogle.golang.org/protobuf v1.28.1\n)\n\n"
            f"replace {generated} => {GENERATED / 'go'}\n"
        )
        (vendor / "modules.txt").write_text(
            f"# {generated} v0.0.0 => {GENERATED / 'go'}\n## explicit\n"
            "# google.golang.org/grpc v1.33.3\n"
            "# google.golang.org/protobuf v1.28.1\n## explicit\n"
            "# google.golang.org/genproto v0.0.0\n# github.com/golang/protobuf v1.5.2\n"
            "# golang.org/x/net v0.7.0\n# golang.org/x/sys v0.5.0\n# golang.org/x/text v0.7.0\n"
            f"# {generated} => {GENERATED / 'go'}\n"
        )
        shutil.copy(STUBONLY / "reader.go", mod / "main.go")
        _run(["go", "build", "-o", str(out / "reader"), "."], mod, env)

    return _cached_build("stubonly-go", key, build) / "reader"


@functools.cache
def build_stubonly_java() -> list[str]:
    """The command that runs StubOnlyReader, compiled against the generated
    stubs' classes alone."""
    if shutil.which("javac") is None or not (JAVA_JARS / "protobuf.jar").exists():
        missing_toolchain("a JDK (javac) with Debian's libprotobuf-java")
    examples = build_java()  # its classes dir holds the compiled stubs
    classpath = examples[examples.index("-cp") + 1]
    stubs = _files(GENERATED / "java")
    key = _hash([STUBONLY / "StubOnlyReader.java", *stubs], _version("javac", "-version"))

    def build(out: Path) -> None:
        (out / "classes").mkdir()
        _run(
            [
                "javac",
                "-nowarn",
                "-encoding",
                "UTF-8",
                "-d",
                str(out / "classes"),
                "-cp",
                classpath,
                str(STUBONLY / "StubOnlyReader.java"),
            ],
            out,
        )

    out = _cached_build("stubonly-java", key, build)
    return ["java", "-cp", f"{out / 'classes'}:{classpath}", "StubOnlyReader"]


@functools.cache
def build_stubonly_node() -> list[str]:
    """The command that runs reader.mjs beside the compiled stubs."""
    client = build_node()  # compiles the stubs (dist/gen) and links node_modules
    out = Path(client[-1]).parents[1]
    shutil.copy(STUBONLY / "reader.mjs", out / "stubonly-reader.mjs")
    return ["node", str(out / "stubonly-reader.mjs")]
