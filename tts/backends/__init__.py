"""Generation backends behind one batched protocol: vLLM offline engine, OpenAI-compatible server,
and a deterministic scripted generator for tests."""
