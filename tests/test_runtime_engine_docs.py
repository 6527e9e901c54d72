"""The custom engine in the README and docs/engines.md, served and called for real."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ServerFactory

from omni_grpc.client import AgentClient
from omni_grpc.convert import message_to_dict
from omni_grpc.trace import TraceRecord
from omni_grpc.trace.validate import validate_records

DOC = Path(__file__).parents[1] / "docs" / "engines.md"
README = Path(__file__).parents[1] / "README.md"
BLOCK = re.compile(r"<!-- echo_engine\.py[^>]*-->\n```python\n(.*?)```", re.S)


def test_readme_and_guide_show_the_same_engine() -> None:
    in_readme = BLOCK.search(README.read_text())
    in_guide = BLOCK.search(DOC.read_text())
    assert in_readme is not None and in_guide is not None
    assert in_readme.group(1) == in_guide.group(1)


@pytest.fixture
def echo_module(tmp_path: Path) -> Iterator[str]:
    text = DOC.read_text()
    match = re.search(r"<!-- echo_engine\.py[^>]*-->\n```python\n(.*?)```", text, re.S)
    assert match is not None, "the engine block is missing from docs/engines.md"
    code = match.group(1)
    assert len(code.strip().splitlines()) <= 30  # "about 20 lines"
    (tmp_path / "echo_engine_doc.py").write_text(code)
    sys.path.insert(0, str(tmp_path))
    yield "echo_engine_doc:create"
    sys.path.remove(str(tmp_path))
    sys.modules.pop("echo_engine_doc", None)


async def test_the_documented_engine_serves_a_valid_stream(
    server_factory: ServerFactory, echo_module: str
) -> None:
    server = await server_factory(engine=echo_module)
    assert server.grpc is not None
    async with AgentClient(server.grpc.address) as client:
        messages = []
        async for event in client.run("hello documented engine"):
            if event.message is not None:
                messages.append(event.message)
            if event.is_task_end:
                break
    records = [TraceRecord(i + 1, m) for i, m in enumerate(messages)]
    assert [i for i in validate_records(records, trace=False) if i.severity == "error"] == []
    texts = [message_to_dict(m)["payload"] for m in messages if m.WhichOneof("payload") == "text"]
    assert texts[-1]["text"] == "hello documented engine "
    assert texts[-1]["role"] == "assistant"
