"""The tools and question the tool-calling tests share (an agent's weather and time tools)."""

KEY = "agent-key"
"""The API key of the agent tests' servers."""

WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city now",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
"""An OpenAI tool definition: the weather in a city."""

TIME_TOOL = {"type": "function", "function": {
    "name": "get_time", "description": "The local time in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
"""An OpenAI tool definition: the local time in a city."""

WEATHER = [WEATHER_TOOL]
"""The tools of an agent that can ask for the weather."""

ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
"""A question that wants the weather tool."""
