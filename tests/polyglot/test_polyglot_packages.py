"""The stubs install the way each ecosystem installs packages, from a clean
directory outside the repository: ``scripts/package`` packs them, and a fresh
project of each language installs the package and calls a real server.

* npm: ``npm install ./omni-grpc-*.tgz`` in a new folder, a TypeScript client
  type-checked against the package's ``.d.ts``, then run.
* Go: a new module requires ``github.com/omni-grpc/omni-grpc/generated/go``
  through a ``replace`` to the packed copy, builds offline against Debian's
  Go packages, and runs.
* Java: the artifact built with ``mvn -o`` is installed into a Maven
  repository, a new Maven project depending on it builds with ``mvn -o``, and
  its program runs.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import tomllib
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from browser.dropping_link import DroppingLink
from small_disk import SmallDisk
from waiting import until

import omni_grpc
from omni_grpc.client import AgentClient
from omni_grpc.server import OmniServer
from polyglot.consumer_steps import run_steps
from polyglot.polyglot_builds import CACHE, GOCODE, missing_toolchain

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).parent / "packages"
DEBIAN_MAVEN_REPO = Path("/usr/share/maven-repo")
# The packages' version is the project's release.
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def run(cmd: list[str], cwd: Path, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600, **kwargs)
    assert done.returncode == 0, f"{cmd}:\n{done.stdout}\n{done.stderr}"
    return done


def pack(kind: str, out: Path) -> Path:
    run([str(ROOT / "scripts" / "package"), str(out), kind], ROOT)
    return out / kind


@pytest.fixture
def server(serve_process: Callable[..., Any], tmp_path: Path) -> str:
    address: str = serve_process("--no-http", "--data-dir", str(tmp_path / "data")).grpc_address
    return address


def check_exact_json(result: dict[str, Any], data: Path) -> None:
    """What a client asked for with include_json is the protocol's own JSON:
    GetHistory's lines are the trace file byte for byte, and Run sent each
    recorded message as the trace records it (and every event as SSE does)."""
    [trace] = list(data.glob(f"traces/*/{result['session']}_*.jsonl"))
    lines = trace.read_bytes()
    assert "".join(line + "\n" for line in result["historyJson"]).encode() == lines
    run_json = result["runJson"]
    assert all(run_json)
    parsed = [json.loads(line) for line in run_json]
    recorded = [
        line for line, value in zip(run_json, parsed, strict=True)
        if "payload" in value and not value["payload"]["type"].startswith("partial_")
    ]  # fmt: skip
    assert recorded == lines.decode().splitlines()[1:]  # the trace after its session_meta
    events = [value for value in parsed if "payload" not in value]
    assert (events[-1]["type"], events[-1]["state"]) == ("task_state", "idle")


def npm_app_with(script: Path, tmp_path: Path) -> Path:
    """A new Node project outside the repository with the packed package and
    Connect for Node installed, and ``script`` beside them."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        missing_toolchain("Node.js and npm")
    [tarball] = list(pack("npm", tmp_path / "dist").glob("omni-grpc-*.tgz"))
    app = outside_the_repo(tmp_path / "app")
    app.mkdir()
    (app / "package.json").write_text('{"name": "npm-user", "private": true, "type": "module"}\n')
    run(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error", str(tarball),
         "@bufbuild/protobuf@2.17.0", "@connectrpc/connect@2.1.2",
         "@connectrpc/connect-node@2.1.2"], app)  # fmt: skip
    shutil.copy(script, app / script.name)
    return app


def outside_the_repo(path: Path) -> Path:
    assert ROOT not in path.resolve().parents, path
    return path


def test_the_npm_package_installs_and_calls_the_service(server: str, tmp_path: Path) -> None:
    if shutil.which("node") is None or shutil.which("npm") is None:
        missing_toolchain("Node.js and npm")
    [tarball] = list(pack("npm", tmp_path / "dist").glob("omni-grpc-*.tgz"))
    assert tarball.name == f"omni-grpc-{VERSION}.tgz"
    listed = run(["tar", "-tzf", str(tarball)], tmp_path).stdout.split()
    for name in ("index", "omni/v1/omni_pb", "omni/v1/agent_service_pb"):
        assert f"package/dist/{name}.js" in listed and f"package/dist/{name}.d.ts" in listed
    assert not [n for n in listed if n.endswith(".ts") and not n.endswith(".d.ts")]

    app = outside_the_repo(tmp_path / "app")
    app.mkdir()
    shutil.copy(tarball, app)
    (app / "package.json").write_text('{"name": "npm-user", "private": true, "type": "module"}\n')
    run(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error", f"./{tarball.name}",
         "@bufbuild/protobuf@2.17.0", "@connectrpc/connect@2.1.2",
         "@connectrpc/connect-node@2.1.2"], app)  # fmt: skip
    installed = json.loads((app / "node_modules" / "omni-grpc" / "package.json").read_text())
    assert installed["version"] == VERSION and "devDependencies" not in installed
    # Type-check the client against the installed .d.ts, then run it.
    shutil.copy(HERE / "client.ts", app / "client.ts")
    tsc = ROOT / "packaging" / "npm" / "node_modules" / ".bin" / "tsc"
    run([str(tsc), "--strict", "--module", "NodeNext", "--moduleResolution", "NodeNext",
         "--target", "ES2022", "--skipLibCheck", "client.ts"], app)  # fmt: skip
    result = json.loads(run(["node", "client.js", server], app).stdout)
    assert result["session"].startswith("session-")
    assert result["kinds"][0] == "text" and result["kinds"][-1] == "@taskState"
    assert "toolCall" in result["kinds"] and result["assistantTexts"] > 0
    assert result["listed"] == [result["session"]]
    check_exact_json(result, tmp_path / "data")
    assert result["withoutJson"] == [""] * len(result["historyJson"])  # only when asked


def test_the_npm_run_helper_throws_for_a_run_the_server_stopped(
    serve_process: Callable[..., Any], small_disk: SmallDisk, tmp_path: Path
) -> None:
    """The disk fills during the run: the server closes the task with IDLE,
    then ends the call with RESOURCE_EXHAUSTED. run() holds the IDLE back
    until the call ended, so a loop that breaks at isTaskEnd gets the error
    instead of a quiet success."""
    app = npm_app_with(HERE / "stopped.mjs", tmp_path)
    served = serve_process(
        "--no-http", "--data-dir", str(small_disk.path / "data"), "--engine-opt", "repeat=200"
    )
    small_disk.leave(pages=2)  # the run's first records fit, its answer does not
    result = json.loads(run(["node", "stopped.mjs", served.grpc_address], app).stdout)
    assert result["threw"] and not result["idle"], result
    assert result["code"] == 8, result  # Connect's Code.ResourceExhausted
    assert "trace could not be written" in result["message"]
    # The failure is in the stream too, before the task's end.
    assert result["kinds"][-2:] == ["requestEnd", "abort"], result


def test_the_npm_readme_steps_run_as_written(
    serve_process: Callable[..., Any], tmp_path: Path
) -> None:
    """The README's programs and install steps, in a new folder: Connect and
    gRPC-Web on the HTTP port run to the task's end; run and attach end by
    themselves (break, AbortSignal) and the process exits."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        missing_toolchain("Node.js and npm")
    served = serve_process("--data-dir", str(tmp_path / "data"))
    assert served.http_address is not None
    dist = pack("npm", tmp_path / "dist")
    readme = ROOT / "packaging" / "npm" / "README.md"
    app = outside_the_repo(tmp_path / "fresh")
    env = {
        "OMNI_NPM": str(dist),
        "OMNI_ADDR": served.grpc_address,
        "OMNI_HTTP": served.http_address,
    }
    done = run_steps(readme, app, env, timeout=600)
    lines = done.stdout.splitlines()
    over_http = [line for line in lines if line.startswith(("connect", "grpc-web"))]
    assert [line.split(":")[0] for line in over_http] == ["connect", "connect-json", "grpc-web"]
    counts = {line.split(" ")[1] for line in over_http}
    assert all(line.endswith("ended: true") for line in over_http) and len(counts) == 1
    assert lines[-1] == "done"
    assert lines[-3].startswith("attached: ") and lines[-2].startswith("attached again: ")
    assert lines[-4].endswith(" event")  # run's last response: the closing task_state
    manifest = json.loads((app / "node_modules" / "omni-grpc" / "package.json").read_text())
    assert manifest["version"] == VERSION == omni_grpc.__version__
    assert manifest["omniGrpc"] == {"schema": "omni.v1", "schemaVersion": omni_grpc.SCHEMA_VERSION}
    assert set(manifest["peerDependencies"]) == {"@bufbuild/protobuf", "@connectrpc/connect"}
    assert "dependencies" not in manifest and "devDependencies" not in manifest
    assert f"revision {omni_grpc.SCHEMA_VERSION}" in readme.read_text()
    index = (app / "node_modules" / "omni-grpc" / "dist" / "index.js").read_text()
    assert f'SCHEMA_VERSION = "{omni_grpc.SCHEMA_VERSION}"' in index


def _vendor(app: Path, module_dir: Path) -> None:
    """vendor/ for an offline build: Debian's Go packages, and the module
    replaced by the packed copy (as examples/go/vendor.sh does)."""
    for path in ("google.golang.org/grpc", "google.golang.org/protobuf",
                 "google.golang.org/genproto", "github.com/golang/protobuf",
                 "golang.org/x/net", "golang.org/x/sys", "golang.org/x/text"):  # fmt: skip
        link = app / "vendor" / path
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(GOCODE / path)
    ours = app / "vendor" / "github.com/omni-grpc/omni-grpc/generated/go"
    ours.parent.mkdir(parents=True, exist_ok=True)
    ours.symlink_to(module_dir)
    (app / "vendor" / "modules.txt").write_text(
        f"# github.com/omni-grpc/omni-grpc/generated/go v0.0.0 => {module_dir}\n"
        "## explicit\n"
        "github.com/omni-grpc/omni-grpc/generated/go/omni/v1\n"
        "# google.golang.org/grpc v1.33.3\n## explicit\n"
        "# google.golang.org/protobuf v1.28.1\n## explicit\n"
        "# google.golang.org/genproto v0.0.0\n"
        "# github.com/golang/protobuf v1.5.2\n"
        "# golang.org/x/net v0.7.0\n# golang.org/x/sys v0.5.0\n# golang.org/x/text v0.7.0\n"
        f"# github.com/omni-grpc/omni-grpc/generated/go => {module_dir}\n"
    )


def test_the_go_module_is_required_through_a_replace(server: str, tmp_path: Path) -> None:
    if shutil.which("go") is None or not (GOCODE / "google.golang.org/grpc").is_dir():
        missing_toolchain("Go with Debian's golang-google-grpc-dev")
    module_dir = pack("go", tmp_path / "dist")
    go_mod = (module_dir / "go.mod").read_text()
    # The module path is the go_package of every .proto, minus the package dir.
    assert go_mod.startswith("module github.com/omni-grpc/omni-grpc/generated/go\n")
    for proto in (ROOT / "proto" / "omni" / "v1").glob("*.proto"):
        assert ('option go_package = "github.com/omni-grpc/omni-grpc/generated/go/omni/v1;omniv1"'
                in proto.read_text()), proto  # fmt: skip

    app = outside_the_repo(tmp_path / "app")
    app.mkdir()
    shutil.copy(HERE / "main.go", app / "main.go")
    (app / "go.mod").write_text(
        "module example.com/omniuser\n\ngo 1.19\n\nrequire (\n"
        "\tgithub.com/omni-grpc/omni-grpc/generated/go v0.0.0\n"
        "\tgoogle.golang.org/grpc v1.33.3\n\tgoogle.golang.org/protobuf v1.28.1\n)\n\n"
        f"replace github.com/omni-grpc/omni-grpc/generated/go => {module_dir}\n"
    )
    _vendor(app, module_dir)
    env = {**os.environ, "GOFLAGS": "-mod=vendor", "GOPROXY": "off",
           "GOCACHE": str(CACHE / "gocache")}  # fmt: skip
    run(["go", "build", "-o", "omniuser", "."], app, env=env)
    result = json.loads(run([str(app / "omniuser"), server], app).stdout)
    assert result["session"].startswith("session-")
    assert result["kinds"][0] == "*omniv1.OmniMessage_Text"
    assert result["kinds"][-1] == "@*omniv1.ServerEvent_TaskState"
    assert "*omniv1.OmniMessage_ToolCall" in result["kinds"]
    assert result["listed"] == [result["session"]]
    check_exact_json(result, tmp_path / "data")


def test_the_go_readme_steps_run_as_written(server: str, tmp_path: Path) -> None:
    """From a new folder, offline: go mod init, require + replace, the
    package's vendoring recipe, build, run."""
    if shutil.which("go") is None or not (GOCODE / "google.golang.org/grpc").is_dir():
        missing_toolchain("Go with Debian's golang-google-grpc-dev")
    module_dir = pack("go", tmp_path / "dist")
    readme = module_dir / "README.md"
    assert readme.read_text() == (ROOT / "packaging" / "go" / "README.md").read_text()
    app = outside_the_repo(tmp_path / "fresh")
    env = {"OMNI_GO": str(module_dir), "OMNI_ADDR": server, "GOPROXY": "off",
           "GOCACHE": str(CACHE / "gocache")}  # fmt: skip
    done = run_steps(readme, app, env)
    lines = done.stdout.splitlines()
    assert lines[-1] == "task state: SESSION_STATE_IDLE"
    assert any(line.startswith("ROLE_ASSISTANT: ") for line in lines)
    go_mod = (app / "go.mod").read_text()
    assert "github.com/omni-grpc/omni-grpc/generated/go v0.0.0" in go_mod
    assert "replace github.com/omni-grpc/omni-grpc/generated/go =>" in go_mod


def test_the_maven_readme_steps_run_as_written(server: str, tmp_path: Path) -> None:
    """As a user with an empty ~/.m2: the README's one-time settings, then
    mvn -o install:install-file, mvn -o package and java -jar."""
    plugins = DEBIAN_MAVEN_REPO / "org/apache/maven/plugins/maven-install-plugin"
    if shutil.which("mvn") is None or not plugins.is_dir():
        missing_toolchain("Maven with Debian's Maven plugins (libmaven-install-plugin-java, ...)")
    dist = pack("java", tmp_path / "dist")
    home = tmp_path / "home"  # a new user: no ~/.m2 at all
    home.mkdir()
    # Java reads the home from the passwd entry, not $HOME: both say the new one.
    env = {"HOME": str(home), "MAVEN_OPTS": f"-Duser.home={home}",
           "OMNI_JAVA": str(dist), "OMNI_ADDR": server}  # fmt: skip
    readme = ROOT / "packaging" / "java" / "README.md"
    done = run_steps(readme, outside_the_repo(tmp_path / "fresh"), env)
    lines = done.stdout.splitlines()
    assert lines[-1] == "task state: SESSION_STATE_IDLE", done.stdout
    assert any(line.startswith("text: ") for line in lines)
    installed = home / ".m2/repository/io/omnigrpc/omni-grpc-stubs" / VERSION
    pom = (installed / f"omni-grpc-stubs-{VERSION}.pom").read_text()
    for artifact in ("protobuf-java", "grpc-api", "grpc-protobuf", "grpc-stub", "grpc-context",
                     "guava", "perfmark-api"):  # fmt: skip
        assert f"<artifactId>{artifact}</artifactId>" in pom, artifact
    assert f"<version>{VERSION}</version>" in pom
    assert f"revision {omni_grpc.SCHEMA_VERSION}" in readme.read_text()


def _maven_repo(tmp_path: Path) -> Path:
    """A Maven repository holding Debian's artifacts (linked, read-only) and
    room for ours: io/omnigrpc is the only real directory."""
    repo = tmp_path / "m2"
    (repo / "io").mkdir(parents=True)
    for entry in DEBIAN_MAVEN_REPO.iterdir():
        if entry.name != "io":
            (repo / entry.name).symlink_to(entry)
    for entry in (DEBIAN_MAVEN_REPO / "io").iterdir():
        (repo / "io" / entry.name).symlink_to(entry)
    return repo


def test_the_maven_artifact_builds_offline_and_serves_a_maven_project(
    server: str, tmp_path: Path
) -> None:
    plugins = DEBIAN_MAVEN_REPO / "org/apache/maven/plugins/maven-compiler-plugin"
    if shutil.which("mvn") is None or not plugins.is_dir():
        missing_toolchain("Maven with Debian's Maven plugins (libmaven-compiler-plugin-java, ...)")
    dist = pack("java", tmp_path / "dist")
    jar, pom = dist / f"omni-grpc-stubs-{VERSION}.jar", dist / f"omni-grpc-stubs-{VERSION}.pom"
    classes = zipfile.ZipFile(jar).namelist()
    assert "io/omnigrpc/omni/v1/AgentServiceGrpc.class" in classes
    assert "io/omnigrpc/omni/v1/OmniMessage.class" in classes

    repo = _maven_repo(tmp_path)
    mvn = ["mvn", "-o", "-q", f"-Dmaven.repo.local={repo}"]
    run([*mvn, "org.apache.maven.plugins:maven-install-plugin:3.1.0:install-file",
         f"-Dfile={jar}", f"-DpomFile={pom}"], tmp_path)  # fmt: skip
    app = outside_the_repo(tmp_path / "app")
    shutil.copytree(HERE / "java", app)
    run([*mvn, "package"], app)
    # Run it on the classpath Maven resolved: our jar and Debian's grpc-java.
    installed = repo / "io/omnigrpc/omni-grpc-stubs" / VERSION / jar.name
    debian = [
        f"/usr/share/java/{name}.jar"
        for name in ("grpc-api", "grpc-context", "grpc-core", "grpc-netty", "grpc-protobuf",
                     "grpc-protobuf-lite", "grpc-stub", "protobuf", "guava", "perfmark-api",
                     "netty-buffer", "netty-codec", "netty-codec-http", "netty-codec-http2",
                     "netty-common", "netty-handler", "netty-resolver", "netty-transport")
    ]  # fmt: skip
    classpath = ":".join([str(app / "target" / "classes"), str(installed), *debian])
    out = run(["java", "-cp", classpath, "example.Main", server], app).stdout.strip()
    fields = dict(part.split("=", 1) for part in out.split(" "))
    assert fields["session"].startswith("session-")
    kinds = fields["kinds"].split(",")
    assert kinds[0] == "TEXT" and kinds[-1] == "@TASK_STATE" and "TOOL_CALL" in kinds
    assert fields["listed"] == fields["session"]


async def test_the_npm_attach_resumes_after_a_dropped_link(
    omni_server: OmniServer, tmp_path: Path
) -> None:
    """attach(..., {resume}) through a TCP link the test drops mid-task: it
    attaches again after its last event id and sees the rest of the task,
    every event once, as the server's own replay has it."""
    assert omni_server.grpc is not None
    app = npm_app_with(HERE / "resume.mjs", tmp_path)
    port = int(omni_server.grpc.address.rsplit(":", 1)[1])
    async with DroppingLink(port) as link, AgentClient(omni_server.grpc.address) as direct:
        started = direct.run("list my files", approval_mode="ask", detach_on_cancel=True)
        sid = await started.session()
        node = await asyncio.create_subprocess_exec(
            "node", "resume.mjs", link.url.removeprefix("http://"), sid, cwd=app,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        lines: list[dict[str, Any]] = []

        async def read() -> None:
            assert node.stdout is not None
            while line := await node.stdout.readline():
                lines.append(json.loads(line))

        reader = asyncio.create_task(read())
        await until(lambda: any(x.get("kind") == "@approvalRequest" for x in lines), "the ask")
        started.cancel()  # detached: the task waits on its approval without a caller
        assert link.drop() >= 1
        await until(lambda: any("resumed" in x for x in lines), "node attaching again")
        call_id = ""
        async for event in direct.attach(sid, None):
            if event.kind == "@approval_request":
                call_id = event.server_event.approval_request.tool_call.tool_call.tool_call_id  # type: ignore[union-attr]
                break
        await direct.approve(sid, call_id, "allow")
        assert await asyncio.wait_for(node.wait(), 120) == 0
        await reader
        seen = [x["id"] for x in lines if x.get("id")]
        first = seen[0]
        replayed = [e async for e in direct.attach(sid, first, until_idle=True)]

    resumed = next(x for x in lines if "resumed" in x)
    # Connect's codes: Unknown, Internal, Unavailable, and Canceled (1), which
    # connect-node reports for a connection lost under the stream.
    assert resumed["resumed"] in (1, 2, 13, 14) and resumed["attempt"] == 1
    assert resumed["last"] in seen
    assert lines[-1] == {"done": True}
    assert len(seen) == len(set(seen))
    # Every message once, in the server's order, to the task's end.
    got = [x["id"] for x in lines if x.get("id") and not x["kind"].startswith("@")]
    assert [i for i in got if i != first] == [e.event_id for e in replayed if e.message is not None]
    assert len(got) > 3
