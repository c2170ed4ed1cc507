"""The scripted backend's replies to requests that offer tools: it plays a model that calls them.

So that an agent's whole loop (call, tool result, final answer) and a tool-use benchmark run on
the scripted backend as on a real engine, a request with ``tools`` is answered like a chat model
trained for tool use, in the Hermes format (``<tool_call>`` tags), the calls read back by tts's
lenient reader as a real backend's fallback reads them:

- the conversation ends with a ``tool`` turn (a result came back): a prose answer that restates the
  result ("The get_weather tool returned: 18C and sunny."), sometimes with a lead-in, so that the
  samples agree in substance and differ in wording (what free-text selection has to handle);
- the problem has a distribution over calls (``for_problems`` on a tool-use benchmark: its gold
  answer is a list of calls, :func:`tts.backends.tool_calls.answer_calls`): the drawn calls; a drawn
  answer that is not a call list (a distractor, the missing mass) is a prose reply without a call;
- otherwise the model calls the offered tool named in the last user message (else the first one),
  its required arguments filled from that message by type (a quoted or capitalised phrase for a
  string, the first number for a number, ``true``, an enum's first value), in ``call_rate`` of the
  samples; ``malformed_rate`` of those calls are cut short (broken JSON), the rest answer in prose.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Mapping, Sequence
from typing import Any

from tts.backends.base import GenerationRequest
from tts.backends.chat import function_spec
from tts.backends.tool_calls import answer_calls

CALL_RATE = 0.8
MALFORMED_RATE = 0.05
_LEADS = ("", "Here is what I found. ", "Sure. ", "According to the tool, ")
_PHRASE = re.compile(r'"([^"]+)"|\'([^\']+)\'|\b([A-Z][a-z]+(?: [A-Z][a-z]+)*)\b')
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def _value(schema: Mapping[str, Any], text: str, used: set[str]) -> Any:
    """A value of the parameter's type taken from the user's text."""
    if schema.get("enum"):
        return schema["enum"][0]
    kind = schema.get("type", "string")
    if kind in ("integer", "number", "float"):
        found = _NUMBER.findall(text)
        value = float(found[0]) if found else 1
        return int(value) if kind == "integer" or float(value).is_integer() else value
    if kind == "boolean":
        return True
    if kind in ("array", "tuple"):
        return [_value(schema.get("items") or {}, text, used)]
    if kind in ("object", "dict"):
        return {}
    found = []
    for m in _PHRASE.finditer(text):
        phrase = next(g for g in m.groups() if g)
        starts_sentence = m.start() == 0 or text[:m.start()].rstrip()[-1:] in ".?!"
        if phrase not in used and phrase.lower() not in ("what", "the", "please", "can", "i", "is"):
            found.append((starts_sentence and m.group(0)[0] not in "\"'", phrase))
    if found:
        phrase = min(found, key=lambda f: f[0])[1]  # a name inside the sentence before a capitalised first word
        used.add(phrase)
        return phrase
    return text.split()[-1].strip("?.!,") if text.split() else "x"


def _call_for(tools: Sequence[Mapping[str, Any]], text: str) -> dict[str, Any]:
    specs = [function_spec(t) for t in tools]
    named = [s for s in specs if str(s.get("name", "")).lower() in text.lower()]
    spec = (named or specs)[0]
    params = spec.get("parameters") or {}
    props = params.get("properties") or {}
    used: set[str] = set()
    args = {name: _value(props.get(name) or {}, text, used) for name in (params.get("required") or [])}
    return {"name": spec.get("name", ""), "arguments": args}


def _write_calls(calls: Sequence[Mapping[str, Any]], broken: bool) -> str:
    blocks = []
    for c in calls:
        body = json.dumps({"name": c["name"], "arguments": c.get("arguments", {})}, ensure_ascii=False)
        blocks.append(f"<tool_call>\n{body[:-2] if broken else body}\n</tool_call>")
    return "\n".join(blocks)


def tool_reply(req: GenerationRequest, dist: Mapping[str, float], draw: Any, rng: random.Random) -> str:
    """The text of one sample of a request that offers tools (module docstring)."""
    tools = json.loads(req.tools or "[]")
    last = req.messages[-1] if req.messages else None
    if last is not None and last.role == "tool":
        called = next((c.name for m in reversed(req.messages) for c in m.tool_calls
                       if c.id == last.tool_call_id), None) or last.name or "tool"
        return f"{rng.choice(_LEADS)}The {called} tool returned: {last.content.strip()}"
    if any(answer_calls(a) is not None for a in dist):  # a distribution over calls (a tool-use benchmark)
        answer = draw(dist, rng)
        calls = answer_calls(answer)
        if calls is None:
            return "I do not know which tool to use for this." if answer is None else \
                f"I think the answer is {answer}, without calling a tool."
        return _write_calls(calls, broken=False)
    user = next((m.content for m in reversed(req.messages) if m.role == "user"), "")
    if rng.random() >= CALL_RATE:
        return f"{rng.choice(_LEADS)}I can answer this without a tool: {user.strip()[:80]}"
    return _write_calls([_call_for(tools, user)], broken=rng.random() < MALFORMED_RATE)
