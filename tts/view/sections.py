"""What a problem's page shows for each strategy family, one function per kind of trace.

- :func:`tree_section`: a step-wise search's tree (beam, DVTS, REBASE, MCTS, ETS, lookahead,
  particle filtering and Gibbs, AB-MCTS) as SVG, and particle filtering's weights per resampling;
- :func:`votes_section`: the answer histogram, each sample under its answer with its outcome,
  verifier score and tokens, and a per-request stop's record (``notes["stop"]``);
- :func:`calls_section`: the chain of calls of revision, generative verification, budget forcing
  and collaboration graphs (their ``Trace.tree`` records), each with its text;
- :func:`programs_section`: code answers, each distinct program with its samples, the sandbox's
  verdict and reason and its check's seconds;
- :func:`tool_calls_section`: each sample's tool calls, the voted call and the repeats.

Each takes the row's trace as JSON (``results.jsonl``) and reads only the keys it finds: a trace
written by an older tts renders with what it has, and :func:`missing` names what it lacks.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from tts.view.html import badge, esc, facts, num, pre, warn
from tts.view.tree_svg import draw_tree, title

TREE_SEARCHES = frozenset({"beam", "dvts", "rebase", "mcts", "ets", "lookahead", "particle_filtering",
                           "particle_gibbs", "ab_mcts"})
CALL_CHAINS = frozenset({"revision", "generative_verification", "budget_forcing", "graph", "aggregate", "genselect",
                         "certainty_probe", "deepconf"})
CODE_STRATEGIES = frozenset({"exec_vote", "public_tests", "codet", "program_vote", "tir"})
_PROGRAM = re.compile(r"^\s*def \w+\(", re.MULTILINE)
"""An answer that defines a function is a program (HumanEval under any voting strategy)."""


def family(trace: dict[str, Any], kind: str) -> str:
    """``tree``, ``calls``, ``code``, ``tools`` or ``votes``: which view a row's trace gets."""
    name = trace.get("strategy") or kind
    samples = trace.get("samples") or []
    if name in TREE_SEARCHES:
        return "tree"
    if any(s.get("tool_calls") for s in samples) or name == "tool_vote":
        return "tools"
    if name in CODE_STRATEGIES or any(_PROGRAM.search(str(s.get("answer") or "")) for s in samples):
        return "code"
    if name in CALL_CHAINS or (trace.get("tree") and name not in ("self_consistency", "best_of_n", "weighted_vote")):
        return "calls"
    return "votes"


def missing(trace: dict[str, Any], fam: str, graded: bool = True) -> list[str]:
    """What this view reads that the trace lacks (traces written by an older tts); ``graded``: the
    row was graded, so its samples should carry their outcomes."""
    out = []
    samples = trace.get("samples") or []
    nodes = trace.get("tree") or []
    notes = trace.get("notes") or {}
    if graded and samples and not all("outcome" in s for s in samples):
        out.append("each sample's graded outcome")
    if fam == "tree" and nodes:
        if not all("tokens" in n for n in nodes):
            out.append("tokens per node")
        if "chosen_node" not in notes and trace.get("selected") is not None:
            out.append("the chosen node (its path is inferred from the answer)")
        if not all("kept" in n for n in nodes):
            out.append("which nodes the search kept")
        if trace.get("strategy") in ("particle_filtering", "particle_gibbs") and "particles" not in notes:
            out.append("particle weights per step")
    return out


# --- tree searches --------------------------------------------------------------------------------


def _chosen_node(trace: dict[str, Any], answer: str | None) -> tuple[Any, bool]:
    """(the chosen node's id, whether the trace said so); an older trace's is inferred: the
    best-scored finished node holding the answer."""
    notes = trace.get("notes") or {}
    if "chosen_node" in notes:
        return notes["chosen_node"], True
    candidates = [n for n in trace.get("tree") or [] if n.get("finished") and answer is not None
                  and str(n.get("answer")) == answer]
    best = max(candidates, key=lambda n: (n.get("score") if isinstance(n.get("score"), (int, float)) else -2.0),
               default=None)
    return (best.get("id") if best else None), False


def tree_section(trace: dict[str, Any], answer: str | None) -> str:
    """The search tree as SVG with a side panel for the clicked node, its counts, and particle weights."""
    nodes = list(trace.get("tree") or [])
    if not nodes:
        return warn("this trace holds no tree (the search kept none, or an older tts did not record it)")
    chosen, said = _chosen_node(trace, answer)
    drawing = draw_tree(nodes, chosen)
    kept = sum(1 for n in nodes if n.get("kept"))
    finished = sum(1 for n in nodes if n.get("finished"))
    tokens = sum(n.get("tokens") or 0 for n in nodes) if any("tokens" in n for n in nodes) else None
    depth = max((n.get("depth") or 0 for n in nodes), default=0)
    head = facts([("nodes", len(nodes)), ("kept", kept), ("finished", finished), ("deepest", depth),
                  ("step tokens", f"{tokens:,}" if tokens is not None else None),
                  ("chosen path", f"{len(drawing.path)} steps" if drawing.path else "none")])
    note = ""
    if drawing.drawn < drawing.total:
        note = warn(f"{drawing.total} nodes: only the kept paths are drawn ({drawing.drawn} nodes); "
                    "+k under a node counts the nodes left out below it.")
    if chosen is not None and not said:
        note += warn("the trace does not say which node was chosen: the path marked is the best-scored finished "
                     "node holding the answer")
    legend = ('<div class="legend"><span>● step</span><span>■ finished</span><span>colour: score, red 0 → green 1'
              '</span><span>faded: pruned</span><span style="color:#2f6fde">thick blue: chosen path</span>'
              "<span>hover or click a node: its step</span></div>")
    by_id = {n.get("id"): n for n in nodes}
    first = (title(by_id[chosen], by_id[chosen].get("tokens")) if chosen in by_id
             else "click a node to read its step, score and tokens")
    panel = (f'<div class="panel"><h3>{"the chosen node" if chosen in by_id else "node"} '
             f'<span class="sub">(click any node)</span></h3>{pre(first)}</div>')
    body = f'<div class="treebox"><div class="svgwrap">{drawing.svg}</div>{panel}</div>'
    path_text = ""
    if drawing.path:
        steps = "".join(f"<li>{esc(num(by_id[k].get('score'), 2))} · {esc(by_id[k].get('tokens', '?'))} tok: "
                        f"{esc(_short(by_id[k].get('text', ''), 160))}</li>" for k in drawing.path)
        path_text = f"<details><summary>the chosen path, step by step</summary><ol>{steps}</ol></details>"
    weights = particles_section(trace)
    return f"<h3>search tree</h3>{head}{note}{legend}{body}{path_text}{weights}"


def particles_section(trace: dict[str, Any]) -> str:
    """Particle filtering's weights at every resampling, with the effective number of particles
    (1 / sum w²: n when the weights are uniform, 1 when one particle takes all)."""
    steps = (trace.get("notes") or {}).get("particles") or []
    if not steps:
        return ""
    width = max(len(s.get("weights") or []) for s in steps)
    rows = []
    for s in steps:
        w = s.get("weights") or []
        drawn = s.get("drawn") or [0] * len(w)
        ess = 1.0 / sum(x * x for x in w) if w and any(w) else 0.0
        cells = "".join(f'<td class="num" title="node {esc(node)}: weight {x:.4f}, drawn {d}×">'
                        f'<span class="bar" style="width:{max(1.0, 46 * x):.0f}px"></span> {x:.2f}'
                        f'{f" ×{d}" if d else ""}</td>'
                        for node, x, d in zip(s.get("nodes") or [], w, drawn, strict=False))
        cells += "<td></td>" * (width - len(w))
        rows.append(f'<tr><td class="num">{esc(s.get("iteration", 0))}</td><td class="num">{esc(s.get("step"))}</td>'
                    f'<td class="num">{ess:.2f} / {len(w)}</td>{cells}</tr>')
    head = "".join(f"<th>p{i}</th>" for i in range(width))
    return ("<h3>particle weights per resampling</h3><div class=sub>each particle's weight and how often it was drawn "
            "(×k); effective = 1 / Σw²: every particle when the weights were uniform, 1 when one took them all</div>"
            f'<table><tr><th>iteration</th><th>step</th><th>effective</th>{head}</tr>{"".join(rows)}</table>')


# --- votes and samples ----------------------------------------------------------------------------


def _short(text: object, width: int = 90) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _groups(samples: Sequence[dict[str, Any]]) -> dict[str, list[int]]:
    """Sample indices by answer key (equivalent answers together: ``7.0`` and ``$7$``)."""
    from tts.answers.equivalence import answer_keys

    answers = [s.get("answer") for s in samples]
    short = [a if a is not None and len(str(a)) <= 200 and "\n" not in str(a) else None for a in answers]
    keys = answer_keys([None if a is None else str(a) for a in short])
    groups: dict[str, list[int]] = {}
    for i, (a, k) in enumerate(zip(answers, keys, strict=True)):
        groups.setdefault("(no answer)" if a is None else (k if k is not None else str(a)), []).append(i)
    return groups


def sample_block(i: int, s: dict[str, Any], score: float | None, chosen: bool) -> str:
    """One sample on one line (number, outcome, tokens, score, the grader's reason, the start of its
    text) that opens onto its whole text; the chosen sample open."""
    bits = " · ".join(b for b in (
        f"{s['completion_tokens']} tok" if s.get("completion_tokens") is not None else "",
        f"score {num(score)}" if score is not None else "",
        f"finish {s['finish_reason']}" if s.get("finish_reason") not in (None, "stop") else "",
        f"why: {s['grade_reason']}" if s.get("grade_reason") else "",
        f"check {s['grading_seconds']:.2f} s" if isinstance(s.get("grading_seconds"), (int, float)) else "") if b)
    mark = " <b>chosen</b>" if chosen else ""
    return (f'<details class="sample"{" open" if chosen else ""}><summary><span class="mono">#{i}</span>'
            f'{badge(s["outcome"]) if s.get("outcome") else ""}{mark} <span class="sub">{esc(bits)}</span> '
            f'<span class="mono sub">{esc(_short(s.get("text", ""), 70))}</span></summary>{pre(s.get("text", ""))}</details>')


def votes_section(trace: dict[str, Any], answer: str | None, gold: str | None) -> str:
    """The answers with their votes (or sample counts) as bars, each with its samples underneath."""
    samples = list(trace.get("samples") or [])
    if not samples:
        return warn("this trace holds no samples")
    scores = list(trace.get("scores") or [])
    votes = {str(k): float(v) for k, v in (trace.get("votes") or {}).items()}
    selected = trace.get("selected")
    groups = _groups(samples)
    from tts.answers.equivalence import answer_keys

    vote_keys = dict(zip(answer_keys(list(votes)), votes.values(), strict=True)) if votes else {}
    weight = {k: vote_keys.get(k, float(len(ix)) if not votes else 0.0) for k, ix in groups.items()}
    total = sum(weight.values()) or 1.0
    answer_key = answer_keys([answer])[0] if answer is not None and "\n" not in answer else answer
    gold_key = answer_keys([gold])[0] if gold is not None and "\n" not in gold and len(gold) <= 200 else None
    weighted = any(v != round(v) for v in votes.values())
    out = [f"<h3>answers ({'weighted votes' if weighted else 'votes' if votes else 'samples'})</h3>", _stop(trace)]
    for key, ix in sorted(groups.items(), key=lambda kv: (-weight[kv[0]], -len(kv[1]))):
        share = weight[key] / total
        is_chosen, is_gold = key == answer_key, key == gold_key
        cls = "bar" + (" chosen" if is_chosen else "") + (" gold" if is_gold else "")
        tags = (" <b>chosen</b>" if is_chosen else "") + (" <b style='color:#2e9d49'>✓ gold</b>" if is_gold else "")
        outcomes = {samples[i].get("outcome") for i in ix} - {None}
        blocks = "".join(sample_block(i, samples[i], scores[i] if i < len(scores) else None, i == selected) for i in ix)
        out.append(f'<details class="answer"{" open" if is_chosen else ""}><summary><span class="{cls}" '
                   f'style="width:{max(2.0, 320 * share):.0f}px"></span> <b class="mono">{esc(_short(key, 80))}</b> · '
                   f"{'weight ' if weighted else 'votes ' if votes else ''}{weight[key]:.3g} ({share:.0%}) · "
                   f"{len(ix)} sample{'s' if len(ix) != 1 else ''}"
                   f"{''.join(badge(o) for o in sorted(outcomes))}{tags}</summary>{blocks}</details>")
    return "".join(out)


def _stop(trace: dict[str, Any]) -> str:
    stop = (trace.get("notes") or {}).get("stop")
    if not isinstance(stop, dict):
        return ""
    return ("<div class=warn>stopped early: " + esc(stop.get("reason") or "no reason given") + "; "
            + esc(f"{stop.get('drawn', '?')} of n={stop.get('n', '?')} drawn, {stop.get('cancelled', 0)} cancelled "
                  f"({stop.get('cancelled_tokens', 0)} tokens), {stop.get('not_drawn', 0)} never started, "
                  f"{stop.get('waves', '?')} waves of {stop.get('wave', '?')}, rule {stop.get('rule', '?')}") + "</div>")


# --- chains of calls ------------------------------------------------------------------------------


def calls_section(trace: dict[str, Any]) -> str:
    """Every recorded call in order, indented under the call it builds on, each with its text."""
    nodes = list(trace.get("tree") or [])
    if not nodes:
        return ""
    out = [f"<h3>the chain of calls ({len(nodes)})</h3>"]
    for n, depth in _depth_first(nodes):
        what = " · ".join(str(x) for x in (n.get("role") or n.get("kind"), n.get("model"),
                                           f"round {n['round']}" if "round" in n else None,
                                           f"chain {n['chain']}" if "chain" in n else None) if x)
        info = facts([("score", num(n["score"]) if isinstance(n.get("score"), (int, float)) else None),
                      ("answer", n.get("answer")), ("tokens", n.get("tokens") or n.get("completion_tokens")),
                      ("prompt tokens", n.get("prompt_tokens")), ("requests", n.get("requests"))])
        kept = " kept" if n.get("kept") else ""
        out.append(f'<div class="call{kept}" style="margin-left:{18 * min(depth, 12)}px"><b class="mono">{esc(n.get("id"))}'
                   f"</b> {esc(what)}{' <b>kept</b>' if kept else ''}{info}"
                   f"<details{' open' if len(nodes) <= 6 else ''}><summary>text</summary>{pre(n.get('text', ''))}"
                   "</details></div>")
    return "".join(out)


def _depth_first(nodes: Sequence[dict[str, Any]]) -> list[tuple[dict[str, Any], int]]:
    """The records with each one's calls right under it (a revision chain reads round after round),
    in record order among siblings, with their depth below the top."""
    ids = {n.get("id") for n in nodes}
    children: dict[Any, list[dict[str, Any]]] = {}
    for n in nodes:
        children.setdefault(n.get("parent") if n.get("parent") in ids else None, []).append(n)
    out: list[tuple[dict[str, Any], int]] = []
    stack = [(n, 0) for n in reversed(children.get(None, []))]
    seen: set[Any] = set()
    while stack:
        n, depth = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        out.append((n, depth))
        stack.extend((c, depth + 1) for c in reversed(children.get(n.get("id"), [])) if c is not n)
    return out + [(n, 0) for n in nodes if id(n) not in seen]  # records in a cycle, at the end


# --- code -----------------------------------------------------------------------------------------


def programs_section(trace: dict[str, Any], answer: str | None) -> str:
    """Each distinct program, the samples that wrote it, and its check in the sandbox (verdict, reason, seconds)."""
    samples = list(trace.get("samples") or [])
    notes = trace.get("notes") or {}
    programs: dict[str, list[int]] = {}
    for i, s in enumerate(samples):
        programs.setdefault(str(s.get("answer")) if s.get("answer") is not None else "(no program)", []).append(i)
    head = facts([(k.replace("_", " "), v) for k, v in notes.items() if isinstance(v, (int, float, str))])
    patterns = _test_patterns(trace.get("votes") or {})
    out = [f"<h3>programs ({len(programs)} distinct of {len(samples)} samples)</h3>", head, patterns]
    for program, ix in sorted(programs.items(), key=lambda kv: -len(kv[1])):
        first = samples[ix[0]]
        outcome = first.get("outcome")
        why = first.get("grade_reason") or ("passed the hidden tests" if outcome == "correct" else None)
        chosen = answer is not None and program == answer
        seconds = first.get("grading_seconds")
        info = facts([("samples", len(ix)), ("sandbox", why),
                      ("check s", f"{seconds:.2f}" if isinstance(seconds, (int, float)) else None)])
        out.append(f'<details class="program"{" open" if chosen else ""}><summary>{badge(outcome)}'
                   f"{' <b>chosen</b>' if chosen else ''} <span class=mono>{esc(_short(program, 90))}</span></summary>"
                   f"{info}{pre(program)}<details><summary>the samples' text</summary>"
                   + "".join(sample_block(i, samples[i], None, i == trace.get("selected")) for i in ix)
                   + "</details></details>")
    return "".join(out)


def _test_patterns(votes: dict[str, Any]) -> str:
    """CodeT's votes are keyed by which generated tests a program passed (``0110``): a row of cells per pattern."""
    if not votes or not all(set(str(k)) <= {"0", "1"} for k in votes):
        return ""
    rows = "".join(f"<tr><td class=mono>{''.join('✔' if c == '1' else '✘' for c in str(k))}</td>"
                   f'<td class="num">{num(float(v))}</td></tr>' for k, v in sorted(votes.items(), key=lambda kv: -kv[1]))
    return f"<table><tr><th>generated tests passed (✔) per program group</th><th>score</th></tr>{rows}</table>"


# --- tool calls -----------------------------------------------------------------------------------


def _calls_text(calls: Sequence[dict[str, Any]]) -> str:
    parts = []
    for c in calls:
        fn = c.get("function") or {}
        args = fn.get("arguments")
        try:
            args = json.dumps(json.loads(args), sort_keys=True) if isinstance(args, str) else json.dumps(args)
        except ValueError:
            pass
        parts.append(f"{fn.get('name')}({args})")
    return "; ".join(parts)


def tool_calls_section(trace: dict[str, Any], answer: str | None) -> str:
    """The voted call, then each sample's calls (or its text when it called nothing), repeats counted."""
    samples = list(trace.get("samples") or [])
    events = trace.get("events") or {}
    voted = answer
    try:
        voted = _calls_text([{"function": c} if "function" not in c else c for c in json.loads(answer)]) if answer else None
    except (ValueError, TypeError, AttributeError):
        pass
    texts = [_calls_text(s.get("tool_calls") or []) for s in samples]
    seen = {t: texts.count(t) for t in texts}
    rows = []
    for i, (s, text) in enumerate(zip(samples, texts, strict=True)):
        rows.append(f'<tr><td class="num">{i}</td><td>{badge(s["outcome"]) if s.get("outcome") else ""}</td>'
                    f'<td class="mono">{esc(text) if text else "<i>no call</i>"}</td>'
                    f'<td class="num">{seen[text] if text else ""}</td>'
                    f"<td>{esc(_short(s.get('text', ''), 80)) if not text else ''}</td></tr>")
    repeats = events.get("repeated_tool_call")
    head = facts([("voted call", voted or "none"), ("samples", len(samples)),
                  ("distinct calls", len([k for k in seen if k])),
                  ("repeats of a call already answered", repeats)])
    return (f"<h3>tool calls</h3>{head}{_stop(trace)}<table><tr><th>#</th><th>outcome</th><th>calls</th>"
            f"<th>samples making this call</th><th>text (no call)</th></tr>{''.join(rows)}</table>")


def events_and_notes(trace: dict[str, Any], skip: Sequence[str] = ("chosen_node", "particles", "stop")) -> str:
    """The trace's event counts and remaining notes, as written."""
    events = trace.get("events") or {}
    notes = {k: v for k, v in (trace.get("notes") or {}).items() if k not in skip}
    if not events and not notes:
        return ""
    body = ""
    if events:
        body += facts([(k.replace("_", " "), v) for k, v in events.items()])
    if notes:
        body += pre(json.dumps(notes, indent=1, default=str, ensure_ascii=False))
    return f"<details><summary>events and notes</summary>{body}</details>"

