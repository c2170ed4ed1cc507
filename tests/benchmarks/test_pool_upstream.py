"""The pool upstream (benchmarks/pool_upstream.py): an OpenAI-compatible server replaying a sample pool.

What the measurements of adaptive sampling rely on: each reply is a stored sample with its stored
answer and exact token count, in a seeded order without repeats; the shared token rate slows
concurrent streams; a stream the client closes is counted; the official client can call it.
"""

from __future__ import annotations

import asyncio
import gzip
import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai
import pytest

from tts.answers.extraction import extract_answer
from tts.prompts import MATH_PROMPT
from tts.types import Problem


def _load_script():
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "pool_upstream.py"
    spec = importlib.util.spec_from_file_location("pool_upstream", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["pool_upstream"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


pu = _load_script()

# problem -> [(answer, num_tokens)], the sample_idx being the position
SAMPLES = {
    "p-easy": [("42", 30), ("42", 45), ("41", 60), (None, 25), ("42", 3), ("\\frac{1}{2}", 2), (None, 0), ("42", 70)],
    "p-gpqa": [("C", 40), ("A", 41), ("C", 42), ("D", 43)],
    "p-even": [("7", 200)] * 8,
    "p-long": [("9", 4000)] * 2,
}
TEXTS = {"p-easy": "What is six times seven?", "p-gpqa": "Which option is right?  (A) one (B) two",
         "p-even": "Count to seven.", "p-long": "Say nine, at length."}


def _write_pool(tmp_path: Path, tokens: bool = True) -> Path:
    rows = [{"problem_id": pid, "model": model, "sample_idx": i, "answer": a, "correct": a == "42",
             "num_tokens": n if tokens else None, "score": None}
            for model in ("m1", "m2") for pid, samples in SAMPLES.items() for i, (a, n) in enumerate(samples)]
    path = tmp_path / "pool.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _write_problems(tmp_path: Path) -> Path:
    path = tmp_path / "problems.jsonl"
    path.write_text("".join(json.dumps({"id": pid, "problem": q, "answer": "?"}) + "\n" for pid, q in TEXTS.items()))
    return path


def _client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url, api_key="none", max_retries=0, timeout=10)


def _ask(client: openai.OpenAI, question: str, model: str = "m1", **kw):
    return client.chat.completions.create(model=model, messages=[{"role": "user", "content": question}], **kw)


def _stats(url: str) -> dict:
    return httpx.get(url.removesuffix("/v1") + "/stats").json()


# --- the rate model, exactly ---------------------------------------------------------------------


def test_shared_rate_divides_the_total_among_choices_in_flight():
    alone = pu.SharedRate(1000)
    alone.add("a", 1000, 0.0)
    assert alone.next_finish() == pytest.approx(1.0)
    crowd = pu.SharedRate(1000)
    for i in range(8):
        crowd.add(i, 1000, 0.0)
    assert crowd.advance(10.0) == list(range(8))
    assert all(crowd.finished_at[i] == pytest.approx(8.0) for i in range(8))  # each 8x slower than alone
    # 100, 200 and 300 tokens at 300 tok/s: 100 each per second until the first ends at 1 s, then 150
    # each until 1.667 s, then the last alone: 600 tokens in 2 s in all.
    mixed = pu.SharedRate(300)
    for key, n in (("s", 100), ("m", 200), ("l", 300)):
        mixed.add(key, n, 0.0)
    assert mixed.advance(5.0) == ["s", "m", "l"]
    assert [mixed.finished_at[k] for k in "sml"] == pytest.approx([1.0, 1 + 100 / 150, 2.0])
    late = pu.SharedRate(100)
    late.add("a", 100, 0.0)
    late.add("b", 100, 0.5)  # joins when "a" is half done: both at 50 tok/s from then
    late.advance(0.75)
    assert late.generated("a") == pytest.approx(62.5) and late.generated("b") == pytest.approx(12.5)


def test_per_stream_cap_limits_a_lone_choice():
    capped = pu.SharedRate(2000, stream_cap=100)
    capped.add("a", 100, 0.0)
    assert capped.next_finish() == pytest.approx(1.0)  # 100 tok/s, not the whole 2000
    for i in range(40):
        capped.add(i, 100, 0.0)
    assert capped.per_stream(len(capped)) == pytest.approx(2000 / 41)


# --- replies -------------------------------------------------------------------------------------


def test_replies_carry_the_stored_answers_and_exact_token_counts(tmp_path):
    with pu.pool_upstream(_write_pool(tmp_path), time_scale=0) as url:
        for pid in ("p-easy", "p-gpqa"):
            n = len(SAMPLES[pid])
            reply = _ask(_client(url), pid, n=n, logprobs=True)
            extra = reply.model_extra["pool_upstream"]
            assert extra["problem_id"] == pid and sorted(extra["sample_idx"]) == list(range(n))
            for choice, idx in zip(reply.choices, extra["sample_idx"]):
                answer, tokens = SAMPLES[pid][idx]
                assert extract_answer(choice.message.content) == answer
                assert len(choice.logprobs.content) == tokens
                assert "".join(t.token for t in choice.logprobs.content) == choice.message.content
                assert choice.finish_reason == "stop"
            assert reply.usage.completion_tokens == sum(t for _, t in SAMPLES[pid])


def test_max_tokens_cuts_a_reply_before_its_answer(tmp_path):
    with pu.pool_upstream(_write_pool(tmp_path), time_scale=0) as url:
        reply = _ask(_client(url), "p-even", n=2, max_tokens=50, logprobs=True)
    assert [c.finish_reason for c in reply.choices] == ["length", "length"]
    assert [len(c.logprobs.content) for c in reply.choices] == [50, 50] and reply.usage.completion_tokens == 100
    assert all(extract_answer(c.message.content) is None for c in reply.choices)


def test_a_sample_without_num_tokens_is_served_at_the_set_length(tmp_path):
    with pu.pool_upstream(_write_pool(tmp_path, tokens=False), time_scale=0, missing_tokens=77) as url:
        reply = _ask(_client(url), "p-gpqa", n=2)
    assert reply.usage.completion_tokens == 2 * 77


@pytest.mark.parametrize("pool_name", ["aime2024_reasoning_models", "gpqa_diamond_reasoning_models",
                                       "math500_reasoning_models", "math_qwen25_rm8"])
def test_every_sample_of_real_problems_extracts_back_to_its_stored_answer(shared_data, tmp_path, pool_name):
    """The reply's framing adds nothing to what tts reads: its extraction is that of the stored answer
    written in a box, which for most answers is the stored string itself (tts reads "1/2" as
    "\\frac{1}{2}" and "34+1=35" as "35", as it would read the model's own box)."""
    path = _one_pool_problems(shared_data / "pools" / f"{pool_name}.jsonl.gz", tmp_path, problems=2)
    replay = pu.PoolReplay(path)
    same = total = 0
    for model in replay.models:
        for pid in replay.pool[model].problem_ids:
            for sample in replay.samples(model, pid):
                tokens = pu.reply_tokens(sample)
                assert len(tokens) == (sample.tokens if sample.tokens else 0)
                reply = "".join(tokens)
                stored = None if sample.answer is None else extract_answer("\\boxed{" + sample.answer + "}")
                assert extract_answer(reply) == stored, (model, pid, sample)
                same += extract_answer(reply) == sample.answer
                total += 1
    assert total >= 2 * 8 and same / total > 0.8


def _one_pool_problems(pool: Path, tmp_path: Path, problems: int) -> Path:
    """The rows of a real pool's first ``problems`` problems, as a pool file of their own."""
    keep: set[str] = set()
    out = []
    with gzip.open(pool, "rt", encoding="utf-8") as fh:
        for line in fh:
            pid = line[line.index('"problem_id": "') + 15:].split('"', 1)[0]
            if pid not in keep and len(keep) < problems:
                keep.add(pid)
            if pid in keep:
                out.append(line)
    path = tmp_path / "subset.jsonl"
    path.write_text("".join(out))
    return path


# --- order ----------------------------------------------------------------------------------------


def test_successive_requests_continue_a_seeded_order_and_seeded_requests_repeat(tmp_path):
    pool = _write_pool(tmp_path)
    with pu.pool_upstream(pool, time_scale=0, seed=3) as url:
        client = _client(url)
        drawn = [_ask(client, "p-easy", n=3).model_extra["pool_upstream"]["sample_idx"] for _ in range(3)]
        seeded = [_ask(client, "p-easy", n=4, seed=11).model_extra["pool_upstream"]["sample_idx"] for _ in range(2)]
        other_model = _ask(client, "p-easy", model="m2", n=8).model_extra["pool_upstream"]["sample_idx"]
        httpx.post(url.removesuffix("/v1") + "/orders/reset")
        restarted = _ask(client, "p-easy", n=8).model_extra["pool_upstream"]["sample_idx"]
        assert httpx.post(url + "/orders/reset", json={"seed": 4}).json() == {"seed": 4}
        reseeded = _ask(client, "p-easy", n=8).model_extra["pool_upstream"]["sample_idx"]
    flat = [i for d in drawn for i in d]
    assert sorted(flat[:8]) == list(range(8))  # no repeat until the problem's 8 samples are used up
    assert flat[8] == flat[0]  # then the order wraps
    assert seeded[0] == seeded[1] and len(set(seeded[0])) == 4
    again = [s.sample_idx for s in pu.PoolReplay(pool, seed=3).draw("m1", "p-easy", 8)]
    other_seed = [s.sample_idx for s in pu.PoolReplay(pool, seed=4).draw("m1", "p-easy", 8)]
    assert again == flat[:8]  # same server seed, same order
    assert other_seed != flat[:8] and sorted(other_model) == list(range(8))
    assert restarted == flat[:8] and reseeded == other_seed  # a restart replays the order, a new seed another


# --- finding the problem -------------------------------------------------------------------------


def test_the_problem_is_found_by_text_in_a_template_by_id_or_by_header(tmp_path):
    with pu.pool_upstream(_write_pool(tmp_path), problems=[_write_problems(tmp_path)], time_scale=0) as url:
        client = _client(url)
        templated = MATH_PROMPT.render(Problem("x", TEXTS["p-gpqa"]))[-1].content
        assert _ask(client, templated).model_extra["pool_upstream"]["problem_id"] == "p-gpqa"
        assert _ask(client, "  Count  to\nseven. ").model_extra["pool_upstream"]["problem_id"] == "p-even"
        assert _ask(client, "Solve p-long.").model_extra["pool_upstream"]["problem_id"] == "p-long"
        assert _ask(client, "anything", extra_body={"problem_id": "p-even"}).model_extra["pool_upstream"][
            "problem_id"] == "p-even"
        assert _ask(client, "anything", extra_headers={"X-Problem-Id": "p-gpqa"}).model_extra["pool_upstream"][
            "problem_id"] == "p-gpqa"
        with pytest.raises(openai.NotFoundError, match="no problem of this pool matches"):
            _ask(client, "What is the capital of France?")
        with pytest.raises(openai.NotFoundError, match="model 'gpt-4' is not in this pool; use one of"):
            _ask(client, "p-easy", model="gpt-4")
        with pytest.raises(openai.BadRequestError, match="n must be an integer between 1 and 4096"):
            _ask(client, "p-easy", n=0)
        assert [m.id for m in client.models.list()] == ["m1", "m2"]


# --- rate, streams, cancellation ------------------------------------------------------------------


def test_eight_choices_in_flight_each_take_eight_times_one_alone(tmp_path):
    # time_scale 0: the virtual clock jumps from event to event, so the times are exact.
    with pu.pool_upstream(_write_pool(tmp_path), tokens_per_second=1000, time_scale=0) as url:
        one = _ask(_client(url), "p-even", n=1).model_extra["pool_upstream"]["virtual_seconds"]
        eight = _ask(_client(url), "p-even", n=8).model_extra["pool_upstream"]["virtual_seconds"]
    assert one == [pytest.approx(0.2)]
    assert eight == [pytest.approx(1.6)] * 8


def test_eight_concurrent_streams_each_go_slower_than_one_alone(tmp_path):
    """With 8 streams open the server's clock gives each an eighth of the rate one alone gets.

    Read from the server's own state once every stream has sent content (each sample would take
    4 s real alone, so all 8 are surely in flight), not from wall timings."""
    async def first_content(client: httpx.AsyncClient, url: str, opened: list, k: int) -> None:
        body = {"model": "m1", "messages": [{"role": "user", "content": "p-long"}], "stream": True, "n": 1}
        async with client.stream("POST", url + "/chat/completions", json=body) as response:
            async for line in response.aiter_lines():
                if '"content"' in line:
                    opened.append(line)
                    while len(opened) < k:  # hold the stream open until every one has started
                        await asyncio.sleep(0.005)
                    opened.append(await client.get(url + "/stats"))
                    return

    async def run(url: str, k: int) -> dict:
        opened: list = []
        async with httpx.AsyncClient(timeout=10) as client:
            await asyncio.gather(*(first_content(client, url, opened, k) for _ in range(k)))
        return next(x for x in opened if not isinstance(x, str)).json()

    with pu.pool_upstream(_write_pool(tmp_path), tokens_per_second=1000, time_scale=1.0) as url:
        alone = asyncio.run(run(url, 1))
        together = asyncio.run(run(url, 8))
        deadline = time.monotonic() + 1.5
        while (after := _stats(url))["open_streams"] and time.monotonic() < deadline:
            time.sleep(0.02)
    assert alone["in_flight_choices"] == 1 and alone["tokens_per_second_each"] == 1000
    assert together["in_flight_choices"] == 8 and together["tokens_per_second_each"] == 125
    assert after["peak_open_streams"] == 8 and after["open_streams"] == after["in_flight_choices"] == 0
    assert after["total"]["cancelled_requests"] == 9  # each left after its first content


def test_a_stream_the_client_closes_is_counted_and_leaves_nothing_open(tmp_path):
    # 2 x 4000 tokens at 1000 tok/s take 8 virtual s = 0.8 s real; the client leaves after a chunk.
    with pu.pool_upstream(_write_pool(tmp_path), tokens_per_second=1000, time_scale=0.1, chunk_tokens=8) as url:
        body = {"model": "m2", "messages": [{"role": "user", "content": "p-long"}], "stream": True, "n": 2}
        with httpx.Client(timeout=10) as client, client.stream("POST", url + "/chat/completions", json=body) as r:
            for line in r.iter_lines():
                if '"content"' in line:
                    during = _stats(url)
                    break  # leaving the line iterator closes the connection
        deadline = time.monotonic() + 1.5
        while (after := _stats(url))["open_streams"] and time.monotonic() < deadline:
            time.sleep(0.02)
    assert during["open_streams"] == 1 and during["in_flight_choices"] == 2
    assert after["open_streams"] == 0 and after["in_flight_choices"] == 0
    model = after["models"]["m2"]
    assert model["cancelled_requests"] == 1 and model["cancelled_choices"] == 2
    assert 0 < model["tokens_sent"] < 8000
    assert model["tokens_sent"] + model["tokens_unsent"] == 8000 and after["total"] == model


def test_the_openai_client_streams_with_usage_and_logprobs(tmp_path):
    with pu.pool_upstream(_write_pool(tmp_path), tokens_per_second=100_000, time_scale=0.01) as url:
        client = _client(url)
        chunks = list(_ask(client, "p-easy", n=8, stream=True, stream_options={"include_usage": True},
                           logprobs=True, top_logprobs=2))
        stats = _stats(url)
        httpx.post(url.removesuffix("/v1") + "/stats/reset")
        reset = _stats(url)
    text, tokens, finish, sample = {}, {}, {}, {}
    for chunk in chunks:
        for c in chunk.choices:
            text[c.index] = text.get(c.index, "") + (c.delta.content or "")
            for t in (c.logprobs.content if c.logprobs else None) or []:
                assert len(t.top_logprobs) == 2 and t.top_logprobs[0].token == t.token
                tokens[c.index] = tokens.get(c.index, 0) + 1
            if c.finish_reason:
                finish[c.index] = c.finish_reason
                sample[c.index] = chunk.model_extra["pool_upstream"]["sample_idx"]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == sum(n for _, n in SAMPLES["p-easy"])
    assert finish == {i: "stop" for i in range(8)}
    for i, idx in sample.items():
        answer, n = SAMPLES["p-easy"][idx]
        assert extract_answer(text[i]) == answer and tokens.get(i, 0) == n
    assert stats["total"]["tokens_sent"] == chunks[-1].usage.completion_tokens and stats["total"]["tokens_unsent"] == 0
    assert stats["open_streams"] == 0 and stats["total"]["requests"] == 1
    assert reset["total"] == {k: 0 for k in reset["total"]} and reset["models"] == {}


def test_a_real_pool_problem_through_its_text(shared_data, tmp_path):
    path = _one_pool_problems(shared_data / "pools" / "aime2024_reasoning_models.jsonl.gz", tmp_path, problems=1)
    bench = [json.loads(line) for line in (shared_data / "benchmarks" / "aime2024.jsonl").read_text().splitlines()]
    pid = json.loads(path.read_text().splitlines()[0])["problem_id"]
    question = next(b["problem"] for b in bench if b["id"] == pid)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    with pu.pool_upstream(path, problems=[shared_data / "benchmarks" / "aime2024.jsonl"], time_scale=0) as url:
        client = _client(url)
        prompt = MATH_PROMPT.render(Problem(pid, question))[-1].content
        reply = _ask(client, prompt, model="Qwen3-4B", n=4)
    extra = reply.model_extra["pool_upstream"]
    stored = {r["sample_idx"]: r for r in rows if r["model"] == "Qwen3-4B"}
    assert extra["problem_id"] == pid
    assert reply.usage.completion_tokens == sum(stored[i]["num_tokens"] for i in extra["sample_idx"])
    answers = [extract_answer(c.message.content) for c in reply.choices]
    assert answers == [stored[i]["answer"] for i in extra["sample_idx"]]


def test_a_non_streaming_request_the_client_abandons_is_counted(tmp_path):
    with pu.pool_upstream(_write_pool(tmp_path), tokens_per_second=1000, time_scale=0.1) as url:
        body = {"model": "m1", "messages": [{"role": "user", "content": "p-long"}], "n": 2}
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(url + "/chat/completions", json=body, timeout=httpx.Timeout(10, read=0.1))
        deadline = time.monotonic() + 1.5
        while (after := _stats(url))["in_flight_choices"] and time.monotonic() < deadline:
            time.sleep(0.02)
    assert after["in_flight_choices"] == 0 and after["open_streams"] == 0
    assert after["total"] == {"requests": 1, "choices": 2, "tokens_sent": 0, "tokens_unsent": 8000,
                              "cancelled_requests": 1, "cancelled_choices": 2}


def test_the_command_serves_a_pool_it_has_never_seen(tmp_path):
    pool = _write_pool(tmp_path)
    script = Path(pu.__file__)
    proc = subprocess.Popen([sys.executable, str(script), "--pool", str(pool), "--port", "0", "--time-scale", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        line = proc.stdout.readline()
        url = line.split()[3]
        assert line.startswith("pool upstream at http://127.0.0.1:") and "serving m1, m2 of" in line
        assert _ask(_client(url), "p-gpqa", model="m2", n=4).usage.completion_tokens == 40 + 41 + 42 + 43
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_bad_command_input_is_one_line(tmp_path):
    with pytest.raises(SystemExit, match=r"pool_upstream: .*nope.jsonl: no such pool file"):
        pu.main(["--pool", str(tmp_path / "nope.jsonl")])
    with pytest.raises(SystemExit, match="time_scale must be 0 .no delays. or positive, got -1"):
        pu.main(["--pool", str(_write_pool(tmp_path)), "--time-scale", "-1"])
    with pytest.raises(SystemExit, match="none of its problem ids is in the pool"):
        pu.main(["--pool", str(_write_pool(tmp_path)), "--problems", str(_write_other_problems(tmp_path))])


def _write_other_problems(tmp_path: Path) -> Path:
    path = tmp_path / "other.jsonl"
    path.write_text(json.dumps({"id": "elsewhere", "problem": "?", "answer": "1"}) + "\n")
    return path
