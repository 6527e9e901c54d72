"""An A2A client of omni-grpc, with the official Python SDK (pip install a2a-sdk).

    python examples/a2a/client.py http://127.0.0.1:8080 "What is in my workspace?"

Streams the task, printing the answer as it arrives; when the agent asks to
approve a tool call (TASK_STATE_INPUT_REQUIRED) it answers "allow" on the task.
"""

from __future__ import annotations

import asyncio
import sys

import httpx
from a2a.client import ClientConfig, create_client
from a2a.types import a2a_pb2 as a2a
from google.protobuf import json_format


async def main(url: str, prompt: str) -> None:
    async with httpx.AsyncClient(timeout=60) as http:
        client = await create_client(url, ClientConfig(httpx_client=http))
        message = a2a.Message(
            message_id="prompt-1", role=a2a.ROLE_USER, parts=[a2a.Part(text=prompt)]
        )
        request = a2a.SendMessageRequest(message=message)
        while request is not None:
            stream, request = client.send_message(request), None
            async for event in stream:
                if (
                    event.HasField("artifact_update")
                    and event.artifact_update.artifact.name == "text"
                ):
                    text = "".join(p.text for p in event.artifact_update.artifact.parts)
                    print(text, end="\n" if event.artifact_update.last_chunk else "", flush=True)
                elif event.HasField("status_update"):
                    status = event.status_update.status
                    if status.state == a2a.TASK_STATE_INPUT_REQUIRED:
                        print("[approving the tool call]")
                        answer = a2a.Part()
                        json_format.ParseDict({"decision": "allow"}, answer.data)
                        request = a2a.SendMessageRequest(
                            message=a2a.Message(
                                message_id="answer-1",
                                role=a2a.ROLE_USER,
                                task_id=event.status_update.task_id,
                                parts=[answer],
                            )
                        )
                        break  # the answer's own stream goes on with the task
                    if status.state in (
                        a2a.TASK_STATE_COMPLETED,
                        a2a.TASK_STATE_FAILED,
                        a2a.TASK_STATE_CANCELED,
                    ):
                        print(f"[{a2a.TaskState.Name(status.state)}]")
        await client.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "hi"))
