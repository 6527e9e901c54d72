"""What serve says at startup: engine, model, backend, auth and tracing, and a
warning for a server anyone can reach, without a token, running tools unasked."""

from __future__ import annotations

import pytest
from conftest import ServeProcess

from omni_grpc.cli.banner import exposure_warning
from omni_grpc.server import ServerConfig
from omni_grpc.transport.grpc import GrpcConfig
from omni_grpc.transport.sse.transport import SseConfig
from omni_grpc.vocabulary import ApprovalMode


def test_the_banner_names_engine_model_backend_auth_and_tracing(
    serve_process: ServeProcess,
) -> None:
    served = serve_process("--no-http", "--auth-token", "s3")
    text = "".join(served.banner)
    assert "omni-grpc engine demo, approval mode allow-all\n" in text
    assert "omni-grpc backend memory, auth bearer token, tracing off\n" in text
    assert "s3" not in text
    # Loopback, or a token: no warning.
    served.process.terminate()
    _, err = served.process.communicate(timeout=30)
    assert "warning" not in err


def _config(host: str, token: str | None, mode: ApprovalMode) -> ServerConfig:
    return ServerConfig(
        approval_mode=mode,
        grpc=GrpcConfig(host=host, auth_token=token),
        http=SseConfig(host="127.0.0.1", auth_token=token),
    )


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "agents.internal"])
def test_a_reachable_tokenless_allow_all_server_is_warned_about(host: str) -> None:
    warning = exposure_warning(_config(host, None, ApprovalMode.ALLOW_ALL))
    assert warning is not None and f"serving on {host} without an auth token" in warning


@pytest.mark.parametrize(
    ("host", "token", "mode"),
    [
        ("127.0.0.1", None, ApprovalMode.ALLOW_ALL),
        ("::1", None, ApprovalMode.ALLOW_ALL),
        ("localhost", None, ApprovalMode.ALLOW_ALL),
        ("0.0.0.0", "t", ApprovalMode.ALLOW_ALL),
        ("0.0.0.0", None, ApprovalMode.ASK),
        ("0.0.0.0", None, ApprovalMode.READ_ONLY),
    ],
)
def test_no_warning_when_any_of_the_three_does_not_hold(
    host: str, token: str | None, mode: ApprovalMode
) -> None:
    assert exposure_warning(_config(host, token, mode)) is None


def test_the_banner_names_the_model_of_an_engine_that_takes_one(
    serve_process: ServeProcess,
) -> None:
    served = serve_process(
        "--no-http", "--engine", "openai", "--base-url", "http://127.0.0.1:9/v1",
        "--model", "tiny-1",
    )  # fmt: skip
    assert "omni-grpc engine openai, model tiny-1, approval mode allow-all\n" in served.banner
