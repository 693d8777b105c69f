"""Run inside a virtualenv with tooljail-client[pydantic-ai,openai-agents] only: each adapter in
its framework's own agent loop, with a scripted model (no network), against a live daemon.
Prints one JSON object of what it saw (the test asserts on it)."""

import asyncio
import importlib.util
import json
import sys
import uuid
from typing import Any

from tooljail.aio import AsyncClient

target, workspace = sys.argv[1], sys.argv[2]
FORCE_PUSH = {"command": "git push --force origin main"}
# The daemon answers a tool_use id it has seen from memory: each run has ids of its own.
RUN = uuid.uuid4().hex[:8]


def tid(name: str) -> str:
    """This run's id of the call named `name` (what the model would have made up)."""
    return f"{name}_{RUN}"


def name_of(tool_call_id: str) -> str:
    return tool_call_id.removesuffix(f"_{RUN}")


async def pydantic_ai_tour(jail: AsyncClient) -> dict[str, Any]:
    from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults
    from pydantic_ai.messages import (
        ModelMessage,
        ModelResponse,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
    )
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from tooljail.pydantic_ai import TooljailToolset

    seen: dict[str, Any] = {}

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen["offered"] = sorted(t.name for t in info.function_tools)
        seen["bash_schema_has_command"] = "command" in next(
            t for t in info.function_tools if t.name == "Bash"
        ).parameters_json_schema.get("properties", {})
        parts = [p for m in messages for p in m.parts]
        # A ModelRetry comes back as a return whose outcome is "retried".
        returns = {p.tool_call_id: p for p in parts if isinstance(p, ToolReturnPart)}
        if not returns:
            return ModelResponse(
                parts=[
                    ToolCallPart("Bash", {"command": "echo from pydantic-ai"}, tid("toolu_pa1")),
                    ToolCallPart("Read", {"file_path": f"{workspace}/hello.txt"}, tid("toolu_pa2")),
                    ToolCallPart("Bash", {"command": "sudo id"}, tid("toolu_pa3")),
                ]
            )
        if tid("toolu_pa4") not in returns:
            return ModelResponse(parts=[ToolCallPart("Bash", FORCE_PUSH, tid("toolu_pa4"))])
        seen["returns"] = {name_of(k): [v.outcome, str(v.content)] for k, v in returns.items()}
        return ModelResponse(parts=[TextPart("done")])

    agent = Agent(
        FunctionModel(model),
        toolsets=[TooljailToolset(jail)],
        output_type=[str, DeferredToolRequests],
    )
    first = await agent.run("look around")
    asked = first.output
    seen["deferred"] = isinstance(asked, DeferredToolRequests)
    if isinstance(asked, DeferredToolRequests):
        seen["approvals"] = [name_of(call.tool_call_id) for call in asked.approvals]
        seen["ask_reasons"] = asked.metadata.get(tid("toolu_pa4"), {}).get("reasons", [])
    second = await agent.run(
        message_history=first.all_messages(),
        deferred_tool_results=DeferredToolResults(approvals={tid("toolu_pa4"): True}),
    )
    seen["final"] = second.output
    return seen


async def openai_agents_tour(jail: AsyncClient) -> dict[str, Any]:
    from agents import Agent, ModelResponse, RunConfig, Runner, Usage
    from agents.models.interface import Model
    from openai.types.responses import (
        ResponseFunctionToolCall,
        ResponseOutputMessage,
        ResponseOutputText,
    )
    from tooljail.openai_agents import function_tools

    seen: dict[str, Any] = {"approver": []}
    calls = [
        (tid("call_oa1"), "Bash", {"command": "echo from openai-agents"}),
        (tid("call_oa2"), "Bash", {"command": "sudo id"}),
        (tid("call_oa3"), "Bash", FORCE_PUSH),
    ]

    class Scripted(Model):  # type: ignore[misc]
        async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
            items = kwargs["input"] if isinstance(kwargs["input"], list) else []
            outputs = {
                i["call_id"]: i["output"]
                for i in items
                if isinstance(i, dict) and i.get("type") == "function_call_output"
            }
            seen["offered"] = sorted(t.name for t in kwargs["tools"])
            if not outputs:
                output: list[Any] = [
                    ResponseFunctionToolCall(
                        type="function_call",
                        call_id=call_id,
                        name=name,
                        arguments=json.dumps(arguments),
                        id=f"fc_{call_id}",
                        status="completed",
                    )
                    for call_id, name, arguments in calls
                ]
            else:
                seen["outputs"] = {name_of(k): str(v) for k, v in outputs.items()}
                output = [
                    ResponseOutputMessage(
                        id="msg_1",
                        type="message",
                        role="assistant",
                        status="completed",
                        content=[
                            ResponseOutputText(type="output_text", text="done", annotations=[])
                        ],
                    )
                ]
            return ModelResponse(output=output, usage=Usage(), response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError

    async def approver(name: str, tool_input: dict[str, Any], reasons: tuple[str, ...]) -> bool:
        seen["approver"].append([name, tool_input["command"], bool(reasons)])
        return True

    tools = await function_tools(jail, tool_names={"Bash", "Read"}, approve=approver)
    agent = Agent(name="coder", tools=tools)
    result = await Runner.run(
        agent, "look around", run_config=RunConfig(model=Scripted(), tracing_disabled=True)
    )
    seen["final"] = result.final_output
    return seen


async def main() -> dict[str, Any]:
    seen: dict[str, Any] = {
        "daemon_importable": importlib.util.find_spec("daemon") is not None,
        "docker_importable": importlib.util.find_spec("docker") is not None,
        "run": RUN,
    }
    async with AsyncClient(target, timeout=120) as jail:
        seen["pydantic_ai"] = await pydantic_ai_tour(jail)
        seen["openai_agents"] = await openai_agents_tour(jail)
    return seen


print(json.dumps(asyncio.run(main())))
