"""Real agent frameworks run their tool loops against ``tts serve`` (issue 33).

Each framework is configured for an OpenAI-compatible chat-completions endpoint, exactly as its
own documentation says to point it at vLLM or any other such server (the openai-agents SDK also on
its default Responses API model, POST /v1/responses, issue 51), and runs an agent with two
tools against a live server: the model calls the tool the question asks for, the framework runs
the Python function and sends the result back, and the final output is a text answer holding the
result. The assertions read the framework's own result objects (final output, the tool calls and
results it recorded) and the tool functions' own record of being invoked, so any break in the
loop (a call returned as text, a refused field, a tool result lost on the way back) fails them.

The fast tests run on the scripted backend (a fake model that calls the offered tool its question
names); the ``model_1p5b`` tests run the same loops on the real engine with Qwen2.5-Coder-1.5B.
The docs test runs the snippets of docs/serving.md#agents-tool-loops-and-free-text, so they cannot rot.
"""

from __future__ import annotations

import asyncio
import functools
import json
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tts.backends.function import RecordingGenerator
from tts.backends.scripted import ScriptedGenerator
from tts.serve import ServeConfig, create_app
from tts.serve.server import ServerThread
from tts.session import Session

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[2]
QUESTION = "What time is it in Tokyo right now? Use the get_time tool."
INSTRUCTIONS = "You are a helpful assistant. Use the tools to answer."


# --- the tools, which record their own invocations -------------------------------------------------

class Tools:
    """Two tools as plain Python functions (each framework derives their schemas from the signature
    and the docstring); ``calls`` records every real invocation."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

        def get_weather(city: str) -> str:
            """The weather in a city now."""
            self.calls.append(("get_weather", city))
            return f"18C and sunny in {city}"

        def get_time(city: str) -> str:
            """The local time in a city now."""
            self.calls.append(("get_time", city))
            return f"14:05 local time in {city}"

        self.functions: list[Callable[[str], str]] = [get_weather, get_time]


@dataclass
class Outcome:
    """What a framework's own result objects say about one agent run."""

    text: str
    """The final output (the agent's answer)."""
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    """The tool calls the framework read from the model's replies: (name, arguments)."""
    results: list[str] = field(default_factory=list)
    """The tool results the framework sent back to the model."""
    requests: int = 0
    """Model requests the framework made, where it says."""


# --- each framework's loop --------------------------------------------------------------------------

def openai_agents_loop(url: str, model: str, tools: Tools, stream: bool = False, max_turns: int = 4,
                       question: str = QUESTION, instructions: str = INSTRUCTIONS, responses: bool = False) -> Outcome:
    """The openai-agents SDK: ``Agent`` + ``Runner`` on ``OpenAIChatCompletionsModel``, or with
    ``responses`` on its default ``OpenAIResponsesModel`` (POST /v1/responses); tracing off: it would
    send traces to OpenAI's platform."""
    agents = pytest.importorskip("agents")
    from openai import AsyncOpenAI

    agents.set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=url, api_key="x", max_retries=0, timeout=300)
    kind = agents.OpenAIResponsesModel if responses else agents.OpenAIChatCompletionsModel
    agent = agents.Agent(name="assistant", instructions=instructions, model=kind(model=model, openai_client=client),
                         tools=[agents.function_tool(f) for f in tools.functions])
    if stream:
        async def run() -> Any:
            result = agents.Runner.run_streamed(agent, question, max_turns=max_turns)
            async for _ in result.stream_events():
                pass
            return result

        result = asyncio.run(run())
    else:
        result = agents.Runner.run_sync(agent, question, max_turns=max_turns)
    calls = [(i.raw_item.name, json.loads(i.raw_item.arguments)) for i in result.new_items
             if isinstance(i, agents.ToolCallItem)]
    results = [str(i.output) for i in result.new_items if isinstance(i, agents.ToolCallOutputItem)]
    return Outcome(str(result.final_output), calls, results, len(result.raw_responses))


def langchain_agent_loop(url: str, model: str, tools: Tools, stream: bool = False,
                         question: str = QUESTION, instructions: str = INSTRUCTIONS) -> Outcome:
    """LangChain's agent: ``create_agent`` over ``ChatOpenAI(base_url=...)``."""
    pytest.importorskip("langchain")
    langchain_openai = pytest.importorskip("langchain_openai")
    from langchain.agents import create_agent
    from langchain_core.messages import AIMessage, ToolMessage

    llm = langchain_openai.ChatOpenAI(base_url=url, api_key="x", model=model, max_retries=0, timeout=300,
                                      streaming=stream)
    agent = create_agent(llm, tools=tools.functions, system_prompt=instructions)
    inputs = {"messages": [{"role": "user", "content": question}]}
    if stream:
        state: dict[str, Any] = {}
        for state in agent.stream(inputs, stream_mode="values"):
            pass
    else:
        state = agent.invoke(inputs)
    messages = state["messages"]
    ai = [m for m in messages if isinstance(m, AIMessage)]
    return Outcome(str(messages[-1].content), [(c["name"], c["args"]) for m in ai for c in m.tool_calls],
                   [str(m.content) for m in messages if isinstance(m, ToolMessage)], len(ai))


def langchain_bind_tools_loop(url: str, model: str, tools: Tools, question: str = QUESTION, **bind: Any) -> Outcome:
    """A hand-written LangChain loop: ``ChatOpenAI.bind_tools``, the calls run with the tools'
    ``invoke``, their ``ToolMessage`` results sent back, until the model answers in text."""
    langchain_openai = pytest.importorskip("langchain_openai")
    from langchain_core.messages import HumanMessage, SystemMessage
    from langchain_core.tools import tool

    by_name = {f.__name__: tool(f) for f in tools.functions}
    llm = langchain_openai.ChatOpenAI(base_url=url, api_key="x", model=model, max_retries=0, timeout=300)
    bound = llm.bind_tools(list(by_name.values()), **bind)
    messages: list[Any] = [SystemMessage(INSTRUCTIONS), HumanMessage(question)]
    outcome = Outcome("")
    for _ in range(4):
        reply = bound.invoke(messages)
        outcome.requests += 1
        messages.append(reply)
        if not reply.tool_calls:
            outcome.text = str(reply.content)
            break
        for call in reply.tool_calls:
            outcome.calls.append((call["name"], call["args"]))
            result = by_name[call["name"]].invoke(call)  # a ToolMessage answering call["id"]
            outcome.results.append(str(result.content))
            messages.append(result)
        bound = llm.bind_tools(list(by_name.values()))  # a forced tool_choice holds for the first turn only
    return outcome


def pydantic_ai_loop(url: str, model: str, tools: Tools, stream: bool = False) -> Outcome:
    """pydantic-ai: ``Agent`` over ``OpenAIChatModel`` with an ``OpenAIProvider(base_url=...)``."""
    pytest.importorskip("pydantic_ai")
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, ToolCallPart, ToolReturnPart
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    provider = OpenAIProvider(base_url=url, api_key="x")
    agent = Agent(OpenAIChatModel(model, provider=provider), instructions=INSTRUCTIONS, tools=tools.functions)
    if stream:
        async def run() -> tuple[str, list[Any]]:
            async with agent.run_stream(QUESTION) as result:
                output = await result.get_output()
            return output, result.all_messages()

        text, messages = asyncio.run(run())
    else:
        result = agent.run_sync(QUESTION)
        text, messages = result.output, result.all_messages()
    parts = [p for m in messages for p in m.parts]
    return Outcome(str(text), [(p.tool_name, p.args_as_dict()) for p in parts if isinstance(p, ToolCallPart)],
                   [str(p.content) for p in parts if isinstance(p, ToolReturnPart)],
                   sum(isinstance(m, ModelResponse) for m in messages))


LOOPS = {"openai-agents": openai_agents_loop, "openai-agents-responses": functools.partial(openai_agents_loop, responses=True),
         "langchain": langchain_agent_loop, "pydantic-ai": pydantic_ai_loop}


# --- a live server ----------------------------------------------------------------------------------

@pytest.fixture
def serve() -> Iterator[Callable[..., tuple[str, RecordingGenerator]]]:
    """Starts ``tts serve`` on the scripted model (served as ``name``); returns (base URL, model)."""
    running: list[tuple[Session, ServerThread]] = []

    def start(name: str = "scripted") -> tuple[str, RecordingGenerator]:
        gen = RecordingGenerator(ScriptedGenerator(model_name=name))
        session = Session(generator=gen, price_as=None, max_tokens=128, batch_window=0.0)
        server = ServerThread(create_app(session, ServeConfig(model=name))).start()
        running.append((session, server))
        return server.url, gen

    yield start
    for session, server in running:
        server.stop()
        session.close()


def _check_scripted_loop(outcome: Outcome, tools: Tools, gen: RecordingGenerator) -> None:
    """The loop a user relies on, to the letter (the scripted model is deterministic in substance)."""
    assert tools.calls == [("get_time", "Tokyo")]  # the function really ran, once, with the model's argument
    assert outcome.calls == [("get_time", {"city": "Tokyo"})]
    assert outcome.results == ["14:05 local time in Tokyo"]
    assert "14:05 local time in Tokyo" in outcome.text and "<tool_call>" not in outcome.text
    assert outcome.requests == 2  # the call, then the answer: no retries of a refused request
    # Every request showed the model both tools; the last one ended with the tool's result.
    assert len(gen.requests) == 2
    for req in gen.requests:
        assert sorted(t["function"]["name"] for t in json.loads(req.tools)) == ["get_time", "get_weather"]
    last = gen.requests[-1].messages
    assert last[-1].role == "tool" and last[-1].content == "14:05 local time in Tokyo"
    assert last[-2].role == "assistant" and last[-2].tool_calls[0].id == last[-1].tool_call_id


# --- fast: every framework, scripted model -----------------------------------------------------------

@pytest.mark.parametrize("framework", list(LOOPS))
@pytest.mark.parametrize("strategy,stream", [("tool_vote-4", False), ("sc-4", False), ("tool_vote-4", True)],
                         ids=["tool_vote-4", "sc-4", "tool_vote-4-streamed"])
def test_a_framework_agent_completes_the_tool_loop(serve, framework, strategy, stream):
    url, gen = serve()
    tools = Tools()
    outcome = LOOPS[framework](url, f"{strategy}/scripted", tools, stream=stream)
    _check_scripted_loop(outcome, tools, gen)


def test_a_langchain_bind_tools_loop_completes(serve):
    url, gen = serve()
    tools = Tools()
    _check_scripted_loop(langchain_bind_tools_loop(url, "tool_vote-4/scripted", tools), tools, gen)


def test_langchain_tool_choice_forms_strict_tools_and_parallel_tool_calls_are_honoured(serve):
    """``bind_tools(tool_choice="get_time", strict=True, parallel_tool_calls=False)`` sends a named
    tool_choice, ``strict`` in each tool and ``parallel_tool_calls``: tts shows the model only the
    named tool, so the call is get_time although the question names get_weather."""
    url, gen = serve()
    tools = Tools()
    outcome = langchain_bind_tools_loop(url, "tool_vote-4/scripted", tools, "What is the weather in Paris? Use get_weather.",
                                        tool_choice="get_time", strict=True, parallel_tool_calls=False)
    assert tools.calls == [("get_time", "Paris")]
    assert [t["function"]["name"] for t in json.loads(gen.requests[0].tools)] == ["get_time"]
    assert "14:05 local time in Paris" in outcome.text


def test_tool_choice_required_is_a_422_through_pydantic_ai_never_text(serve):
    """pydantic-ai's structured output asks for its ``final_result`` tool with tool_choice
    ``required``; the scripted model answers the tool result in prose, so no sample calls a tool:
    the framework gets tts's 422 ``no_tool_call`` (and can retry or fail), not text it would
    mistake for a call."""
    pytest.importorskip("pydantic_ai")
    from pydantic import BaseModel
    from pydantic_ai import Agent
    from pydantic_ai.exceptions import ModelHTTPError
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    class LocalTime(BaseModel):
        city: str
        time: str

    url, _ = serve()
    tools = Tools()
    model = OpenAIChatModel("tool_vote-4/scripted", provider=OpenAIProvider(base_url=url, api_key="x"))
    agent = Agent(model, instructions=INSTRUCTIONS, tools=tools.functions, output_type=LocalTime, retries=0)
    with pytest.raises(ModelHTTPError) as err:
        agent.run_sync(QUESTION)
    assert err.value.status_code == 422 and err.value.body["code"] == "no_tool_call"
    assert tools.calls == [("get_time", "Tokyo")]  # the first turn's call did run


# --- the docs' snippets -----------------------------------------------------------------------------

SECTION = "## Agents: tool loops and free text"


def _section_snippets() -> list[str]:
    text = (ROOT / "docs" / "serving.md").read_text()
    assert SECTION + "\n" in text, f"docs/serving.md lost its section {SECTION!r} (README links to it)"
    body = text.split(SECTION + "\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", body, flags=re.DOTALL)


def test_the_docs_agent_snippets_run_against_tts_serve(serve, monkeypatch, capsys):
    """Each python block of the docs section, run as written against a live server on the scripted
    model (served under the snippets' model name; the snippets read ``TTS_BASE_URL``), prints an
    answer holding its tool's result."""
    snippets = _section_snippets()
    frameworks = {"agents": "openai-agents", "langchain": "langchain", "pydantic_ai": "pydantic-ai"}
    found = {name for module, name in frameworks.items() for s in snippets if f"from {module}" in s}
    assert found == set(frameworks.values()), "one snippet per framework"
    for module in frameworks:
        pytest.importorskip(module)
    models = {m for s in snippets for m in re.findall(r'"tool_vote-\d+/([\w.-]+)"', s)}
    assert len(models) == 1, f"the snippets should name one served model, got {models}"
    url, gen = serve(models.pop())
    monkeypatch.setenv("TTS_BASE_URL", url)
    for i, snippet in enumerate(snippets, 1):
        capsys.readouterr()
        exec(compile(snippet, f"<docs/serving.md agents snippet {i}>", "exec"), {"__name__": "__docs__"})  # noqa: S102 - the docs, run as written
        printed = capsys.readouterr().out
        assert "18C and sunny in Paris" in printed, (snippet, printed)
    assert sum(bool(r.messages) and r.messages[-1].role == "tool" for r in gen.requests) == len(snippets)


# --- what the real model is shown: its own chat template, tools included ----------------------------

def _local_model(name: str) -> Path:
    """The prepared model directory (tokenizer and chat template), or skip."""
    from tts.paths import cache_dir

    path = cache_dir() / "models" / name
    if not (path / ".tts-prepared").is_file():
        pytest.skip(f"{name} is not prepared here (tts models prepare {name})")
    return path


def _tokenizer(name: str) -> Any:
    transformers = pytest.importorskip("transformers")
    return transformers.AutoTokenizer.from_pretrained(str(_local_model(name)))


def _scripted_sc4_request(serve: Callable[..., tuple[str, RecordingGenerator]], name: str) -> Any:
    """The last engine request of an openai-agents loop with ``sc-4`` (the tool result turn)."""
    url, gen = serve(name)
    tools = Tools()
    openai_agents_loop(url, f"sc-4/{name}", tools)
    assert tools.calls == [("get_time", "Tokyo")]
    return gen.requests[-1]


def test_qwen_template_shows_the_tools_and_the_tool_turn(serve):
    """With a Qwen chat template (tools support), an sc-4 request with tools renders both tools
    in the template's ``<tools>`` block, the call as ``<tool_call>`` and the result as
    ``<tool_response>``: what vLLM's engine is given (``tts.backends.vllm`` renders with this)."""
    from tts.backends.chat_render import render_chat

    tokenizer = _tokenizer("qwen2.5-coder-1.5b")
    req = _scripted_sc4_request(serve, "qwen2.5-coder-1.5b")
    prompt = render_chat(tokenizer, req.messages, req.tools)
    system = prompt.split("<|im_start|>system\n", 1)[1].split("<|im_end|>", 1)[0]
    assert system.startswith(INSTRUCTIONS)  # the agent's instructions, then the template's tools block
    tools_block = system.split("<tools>\n", 1)[1].split("\n</tools>", 1)[0]
    assert [json.loads(line)["function"]["name"] for line in tools_block.splitlines()] == ["get_weather", "get_time"]
    call = re.search(r"<\|im_start\|>assistant\n<tool_call>\n(.*?)\n</tool_call><\|im_end\|>", prompt, re.DOTALL)
    assert call and json.loads(call.group(1)) == {"name": "get_time", "arguments": {"city": "Tokyo"}}
    assert "<|im_start|>user\n<tool_response>\n14:05 local time in Tokyo\n</tool_response>" in prompt
    assert prompt.endswith("<|im_start|>assistant\n")


def test_smollm2_template_without_tools_gets_them_in_the_system_message(serve):
    """SmolLM2's template renders only role and content: the documented fallback writes the tools
    into the system message (Hermes format), the call as ``<tool_call>`` text and the result as a
    user turn in ``<tool_response>`` tags, so nothing the agent sent is dropped."""
    from tts.backends.chat_render import render_chat, template_takes_tools

    tokenizer = _tokenizer("smollm2-135m")
    assert not template_takes_tools(tokenizer)
    req = _scripted_sc4_request(serve, "smollm2-135m")
    prompt = render_chat(tokenizer, req.messages, req.tools)
    system = prompt.split("<|im_start|>system\n", 1)[1].split("<|im_end|>", 1)[0]
    assert system.startswith(INSTRUCTIONS) and "<tools>" in system
    offered = [json.loads(line)["name"] for line in system.split("<tools>\n", 1)[1].split("\n</tools>", 1)[0].splitlines()]
    assert offered == ["get_weather", "get_time"]
    assert '<tool_call>\n{"name": "get_time", "arguments": {"city": "Tokyo"}}\n</tool_call>' in prompt
    assert "<|im_start|>user\n<tool_response>\n14:05 local time in Tokyo\n</tool_response><|im_end|>" in prompt


# --- slow: the real engine, Qwen2.5-Coder-1.5B on vLLM ---------------------------------------------

@dataclass
class RealServer:
    """``tts serve`` over the real engine, and every request the engine was sent (to render them)."""

    url: str
    generator: Any
    requests: list[Any]

    def prompt(self, i: int) -> str:
        """The text the model was given for request ``i``, rendered by the engine's own renderer."""
        return self.generator.tokenizer.decode(self.generator.render(self.requests[i]))


@pytest.fixture(scope="module")
def real_server() -> Iterator[RealServer]:
    """``tts serve`` over vLLM with Qwen2.5-Coder-1.5B (skips when the model is not prepared).

    Sized for a shared CPU machine: the model's KV is 28 KiB a token, so 1 GiB holds 4 samples of
    a 4096-token context twice over; bfloat16 weights are what ``dtype="auto"`` chooses on CPUs with
    bf16 instructions, and on one with only AVX2 (float32 there) they halve the 6 GB of float32
    weights. With 4 GiB and float32 the engine peaked at 8.5 GB resident and was killed for memory
    on a 23 GB machine that ran three other engines."""
    pytest.importorskip("vllm")
    from tts.backends.vllm import VLLMGenerator
    from tts.config import VLLMBackendConfig
    from tts.models import ModelError, prepare_model

    try:
        prepare_model("qwen2.5-coder-1.5b")
    except ModelError as exc:
        pytest.skip(str(exc).splitlines()[0])
    start = time.perf_counter()
    with VLLMGenerator(VLLMBackendConfig(model="qwen2.5-coder-1.5b", max_model_len=4096, kv_cache_gib=1,
                                         dtype="bfloat16")) as gen:
        seen: list[Any] = []
        generate = gen.generate

        def recording(requests):
            seen.extend(requests)
            return generate(requests)

        gen.generate = recording
        session = Session(generator=gen, price_as=None, max_tokens=96, batch_window=0.05)
        server = ServerThread(create_app(session, ServeConfig(model="qwen2.5-coder-1.5b"))).start()
        print(f"\nengine and server up in {time.perf_counter() - start:.0f} s")
        try:
            yield RealServer(server.url, gen, seen)
        finally:
            server.stop()
            session.close()


REAL_INSTRUCTIONS = "You are a helpful assistant. Use the tools to answer, then answer the user in one sentence."
REAL_QUESTION = "What time is it in Tokyo right now?"


@pytest.mark.slow
@pytest.mark.model_1p5b
@pytest.mark.timeout(1500)
@pytest.mark.parametrize("framework", ["openai-agents", "langchain", "openai-agents-responses"])
def test_a_framework_agent_completes_the_tool_loop_on_the_real_model(real_server, framework):
    """The loop on Qwen2.5-Coder-1.5B with tool_vote-8: the model's calls (often fenced JSON rather
    than <tool_call> tags; tts's lenient reader reads them) are voted, the framework runs the chosen
    one, the next request shows the model the result in its own template, and an answer in text
    ends the loop at the second request.

    After the result this model calls the same tool again in about half of its samples (greedy
    too; with "Use the get_time tool." in the question, in all of them): its_hub's rule (half the
    samples call, so the calls vote) would loop the agent until its turn limit. tool_vote's
    repeated calls abstain, so the samples that answer from the result decide."""
    tools = Tools()
    real_server.requests.clear()
    start = time.perf_counter()
    outcome = LOOPS[framework](real_server.url, "tool_vote-8/qwen2.5-coder-1.5b", tools,
                               question=REAL_QUESTION, instructions=REAL_INSTRUCTIONS)
    print(f"\n{framework}: {time.perf_counter() - start:.0f} s, {outcome.requests} model requests, "
          f"tool calls run {tools.calls}, answer {outcome.text!r}")
    assert tools.calls == [("get_time", "Tokyo")]
    assert outcome.results and outcome.results[0].startswith("14:05 local time in")
    first, second = real_server.prompt(0), real_server.prompt(1)
    for prompt in (first, second):
        tools_block = prompt.split("<tools>\n", 1)[1].split("\n</tools>", 1)[0]
        assert [json.loads(line)["function"]["name"] for line in tools_block.splitlines()] == ["get_weather", "get_time"]
    assert "<tool_response>" not in first
    assert "<|im_start|>user\n<tool_response>\n14:05 local time in Tokyo\n</tool_response><|im_end|>" in second
    # The loop ended with an answer in text at the second request: no repeated call, no call markup.
    assert outcome.requests == 2 and outcome.text.strip()
    assert "<tool_call>" not in outcome.text and '"arguments"' not in outcome.text
    # Whether that text uses the result is the model's part, not the loop's: measured, not asserted
    # (one run each: openai-agents "The local time in Tokyo right now is 14:05.", LangChain "The
    # weather in Tokyo now is sunny."; docs/serving.md).


@pytest.mark.slow
@pytest.mark.model_1p5b
@pytest.mark.timeout(600)
def test_sc4_with_tools_on_the_real_model_shows_them_in_its_template_and_forced_calls_are_calls(real_server):
    """An ``sc-4`` request with tools (the openai client): the engine is given the tools in Qwen's
    ``<tools>`` block; with ``tool_choice: "required"`` every sample is decoded as a call (vLLM's
    structured outputs), so the reply is the voted call, never prose."""
    from openai import OpenAI

    client = OpenAI(base_url=real_server.url, api_key="x", max_retries=0, timeout=300)
    specs = [{"type": "function", "function": {"name": f.__name__, "description": f.__doc__,
                                               "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                              "required": ["city"]}}} for f in Tools().functions]
    real_server.requests.clear()
    reply = client.chat.completions.create(model="sc-4/qwen2.5-coder-1.5b", tools=specs, tool_choice="required",
                                           messages=[{"role": "user", "content": "How warm is it in Oslo now?"}])
    prompt = real_server.prompt(0)
    assert '"name": "get_weather"' in prompt.split("<tools>", 1)[1] and "How warm is it in Oslo now?" in prompt
    choice = reply.choices[0]
    print(f"\nsc-4 required: {choice.finish_reason}, {[(c.function.name, c.function.arguments) for c in choice.message.tool_calls or []]}")
    assert choice.finish_reason == "tool_calls" and choice.message.tool_calls
    assert choice.message.tool_calls[0].function.name in ("get_weather", "get_time")
    assert json.loads(choice.message.tool_calls[0].function.arguments).get("city")
