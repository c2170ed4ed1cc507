"""The server's own work per request: `tts serve`'s app called as ASGI, with the solve replaced by a
finished one, so that neither sockets, a load client, nor solve threads (and their contention for
the GIL) are counted. Prints the CPU time per request (median of rounds); ``--profile`` prints
cProfile's table of one round instead.

    python benchmarks/serve_overhead.py                 # e.g. 0.47 ms per request
    python benchmarks/serve_overhead.py --profile cumulative
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time

QUESTION = "What is 6 * 7? Answer with just the number."


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--requests", type=int, default=1000, help="Requests per round.")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--strategy", default="sc-4")
    p.add_argument("--profile", metavar="SORT", help="Profile one round; sort by this (tottime, cumulative).")
    args = p.parse_args()

    from tts.backends.scripted import ScriptedGenerator
    from tts.serve import ServeConfig, create_app
    from tts.serve.gc_tuning import tune_gc
    from tts.session import Session

    gen = ScriptedGenerator(seed=0, model_name="scripted")
    session = Session(generator=gen, max_tokens=64, batch_window=0.0, price_as="smollm2-135m")
    app = create_app(session, ServeConfig(model="scripted", default_strategy=args.strategy, prompt="math"))
    finished = session.solve(QUESTION, strategy="self_consistency", n=4)

    async def solved(question: str, **kwargs: object) -> object:  # the solve, already done
        return finished

    session.asolve = solved  # type: ignore[method-assign]
    tune_gc()  # as tts serve does at start-up
    body = json.dumps({"model": f"{args.strategy}/scripted", "messages": [{"role": "user", "content": QUESTION}]})
    raw = body.encode()
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": "/v1/chat/completions", "raw_path": b"/v1/chat/completions", "query_string": b"",
             "root_path": "", "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 2),
             "headers": [(b"host", b"x"), (b"content-type", b"application/json"),
                         (b"content-length", str(len(raw)).encode())]}

    async def one() -> None:
        sent, gone, out = False, asyncio.Event(), []

        async def receive() -> dict:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": raw, "more_body": False}
            await gone.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict) -> None:
            out.append(message)

        await app({**scope, "state": {}}, receive, send)
        gone.set()
        if out[0]["status"] != 200:
            raise RuntimeError(f"the server answered {out}")

    async def round_() -> None:
        for _ in range(args.requests):
            await one()

    asyncio.run(round_())  # warm
    try:
        if args.profile:
            import cProfile
            import pstats

            profile = cProfile.Profile()
            profile.enable()
            asyncio.run(round_())
            profile.disable()
            pstats.Stats(profile).sort_stats(args.profile).print_stats(40)
            return
        times = []
        for _ in range(args.rounds):
            t = time.process_time()
            asyncio.run(round_())
            times.append(time.process_time() - t)
        ms = 1000 * statistics.median(times) / args.requests
        print(f"the server's own work: {ms:.3f} ms per request (CPU time, median of {args.rounds} rounds of "
              f"{args.requests})")
    finally:
        session.close()
        gen.close()


if __name__ == "__main__":
    main()
