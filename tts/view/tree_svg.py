"""A search tree drawn as SVG in Python: each node a step, its score as colour, its step on hover or click.

Layout: the virtual root (the question) on top, one row per depth; leaves take successive columns
in depth-first order and a parent sits over the middle of its children, so sibling steps line up
and a kept path reads as a line from the top. A circle is a step, a square a finished solution;
green to red is the verifier's score (grey: none); a pruned node is faded; the chosen solution's
path is drawn thick and blue. Every node's ``<title>`` holds its facts and its step (escaped), which
a browser shows on hover and the page's script copies into the side panel on click.

Large trees: above :data:`COLLAPSE_ABOVE` nodes only the kept paths (every kept node and its
ancestors, and the chosen path) are drawn, and each drawn node says how many nodes below it were
left out (``+k``), so a 2,000-node search still opens at once and shows what the search kept.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tts.view.html import esc, num

COLLAPSE_ABOVE = 300
"""Trees with more nodes are drawn collapsed to their kept paths."""

_DX, _DY, _MARGIN, _R = 24, 62, 22, 7
_ROOT = "__question__"


@dataclass
class TreeDrawing:
    """An SVG of a tree and what it shows."""

    svg: str
    total: int
    """Nodes in the trace."""
    drawn: int
    """Nodes drawn (fewer than ``total`` when collapsed)."""
    path: list[Hashable] = field(default_factory=list)
    """Ids of the chosen solution's path, top first (empty when no node was chosen)."""


def _colour(score: Any) -> str:
    if not isinstance(score, (int, float)) or not 0.0 <= score <= 1.0:
        return "#b9bec7"
    return f"hsl({score * 120:.0f},62%,46%)"


def title(node: dict[str, Any], step_tokens: Any) -> str:
    """A node's facts on one line, then its step: what hovering or clicking it shows."""
    bits = [f"node {node.get('id')}", f"depth {node.get('depth', '?')}", f"score {num(node.get('score'))}"]
    if step_tokens is not None:
        bits.append(f"{step_tokens} tokens")
    if "kept" in node:
        bits.append("kept" if node.get("kept") else "pruned")
    if node.get("finished"):
        bits.append("finished")
    if node.get("answer") is not None:
        bits.append(f"answer {node['answer']}")
    if node.get("forced"):
        bits.append(f"answer forced ({node['forced']})")
    for key in ("model", "action"):
        if node.get(key):
            bits.append(f"{key} {node[key]}")
    return " · ".join(str(b) for b in bits) + "\n\n" + str(node.get("text", ""))


def path_to(nodes: dict[Hashable, dict[str, Any]], chosen: Hashable | None) -> list[Hashable]:
    """Ids from the top of the tree down to ``chosen`` (empty when it is not a node)."""
    path: list[Hashable] = []
    seen: set[Hashable] = set()
    at = chosen
    while at is not None and at in nodes and at not in seen:
        seen.add(at)
        path.append(at)
        at = nodes[at].get("parent")
    return path[::-1]


def draw_tree(records: Sequence[dict[str, Any]], chosen: Hashable | None = None,
              collapse_above: int = COLLAPSE_ABOVE) -> TreeDrawing:
    """The tree of ``records`` (``id``, ``parent``; ``score``, ``kept``, ``finished``, ``tokens``,
    ``text`` where the trace has them) as SVG, ``chosen``'s path marked."""
    nodes = {r.get("id"): r for r in records}
    parent = {k: (r.get("parent") if r.get("parent") in nodes else _ROOT) for k, r in nodes.items()}
    children: dict[Hashable, list[Hashable]] = {_ROOT: []}
    for k in nodes:
        children.setdefault(parent[k], []).append(k)
    path = path_to(nodes, chosen)
    shown = set(nodes)
    if len(nodes) > collapse_above:
        shown = set(path)
        for k, r in nodes.items():
            if r.get("kept"):
                at: Hashable = k
                while at != _ROOT and at not in shown:
                    shown.add(at)
                    at = parent[at]
    size = _subtree_sizes(children)
    hidden = {k: sum(size[c] for c in children.get(k, []) if c not in shown) for k in [_ROOT, *shown]}
    place, levels = _layout(children, shown)
    width = _MARGIN * 2 + max(1, max((x for x, _ in place.values()), default=0) + 1) * _DX + 40
    height = _MARGIN * 2 + (levels + 1) * _DY
    on_path = set(path)
    edges, marks = [], []
    for k, (x, y) in place.items():
        if k == _ROOT:
            continue
        px, py = place[parent[k]]
        hot = k in on_path
        edges.append(f'<line x1="{_cx(px)}" y1="{_cy(py)}" x2="{_cx(x)}" y2="{_cy(y)}" '
                     f'stroke="{"#2f6fde" if hot else "#c3c8d0"}" stroke-width="{3 if hot else 1.2}"/>')
    labels = len(place) <= 120
    for k, (x, y) in place.items():
        cx, cy = _cx(x), _cy(y)
        if k == _ROOT:
            marks.append(f'<g><circle cx="{cx}" cy="{cy}" r="{_R + 2}" fill="#1d2330"/><title>the question</title></g>')
        else:
            marks.append(_mark(nodes[k], k, cx, cy, parent, nodes, on_path, chosen, labels))
        if hidden.get(k):
            marks.append(f'<g class="more"><text x="{float(cx) + 10:.1f}" y="{float(cy) + 20:.0f}" font-size="10" '
                         f'fill="#6b7380">'
                         f'+{hidden[k]}</text><title>{hidden[k]} nodes below this one are not drawn: they lie off '
                         f'the kept paths of a {len(nodes)}-node tree</title></g>')
    svg = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" role="img" '
           f'aria-label="search tree, {len(place) - 1} of {len(nodes)} nodes drawn">'
           + "".join(edges) + "".join(marks) + "</svg>")
    return TreeDrawing(svg, len(nodes), len(place) - 1, path)


def _cx(x: float) -> str:
    return f"{_MARGIN + 10 + x * _DX:.1f}"


def _cy(y: int) -> str:
    return f"{_MARGIN + y * _DY}"


def _mark(node: dict[str, Any], key: Hashable, cx: str, cy: str, parent: dict[Hashable, Hashable],
          nodes: dict[Hashable, dict[str, Any]], on_path: set[Hashable], chosen: Hashable | None, labels: bool) -> str:
    kept = node.get("kept", True)
    classes = ["n", "kept" if kept else "pruned"]
    if node.get("finished"):
        classes.append("fin")
    if key in on_path:
        classes.append("path")
    if key == chosen:
        classes.append("chosen")
    fill, opacity = _colour(node.get("score")), "1" if kept else "0.42"
    stroke = "#2f6fde" if key in on_path else ("#2b313b" if kept else "#9aa1ab")
    width = "2.5" if key in on_path else "1.2"
    x, y = float(cx), float(cy)
    if node.get("finished"):
        shape = (f'<rect x="{x - _R:.1f}" y="{y - _R:.1f}" width="{2 * _R}" height="{2 * _R}" rx="2" fill="{fill}" '
                 f'stroke="{stroke}" stroke-width="{width}" opacity="{opacity}"/>')
    else:
        shape = (f'<circle cx="{cx}" cy="{cy}" r="{_R}" fill="{fill}" stroke="{stroke}" stroke-width="{width}" '
                 f'opacity="{opacity}"/>')
    if key == chosen:
        shape += f'<circle cx="{cx}" cy="{cy}" r="{_R + 5}" fill="none" stroke="#2f6fde" stroke-width="2"/>'
    label = ""
    if labels and isinstance(node.get("score"), (int, float)):
        label = (f'<text x="{cx}" y="{y + 20:.0f}" font-size="9.5" text-anchor="middle" fill="#4a5260">'
                 f'{num(node["score"], 2)}</text>')
    tokens = node.get("tokens")
    return (f'<g class="{" ".join(classes)}" data-id="{esc(key)}">{shape}{label}'
            f"<title>{esc(title(node, tokens))}</title></g>")


def _subtree_sizes(children: dict[Hashable, list[Hashable]]) -> dict[Hashable, int]:
    """Nodes in each subtree (the node itself included), without recursion (deep trees)."""
    size: dict[Hashable, int] = {}
    stack: list[tuple[Hashable, bool]] = [(_ROOT, False)]
    while stack:
        k, done = stack.pop()
        if done:
            size[k] = 1 + sum(size[c] for c in children.get(k, []))
            continue
        stack.append((k, True))
        stack.extend((c, False) for c in children.get(k, []))
    return size


def _layout(children: dict[Hashable, list[Hashable]], shown: set[Hashable]) -> tuple[dict[Hashable, tuple[float, int]], int]:
    """(column, row) of every drawn node and the root; leaves in depth-first order, parents centred."""
    place: dict[Hashable, tuple[float, int]] = {}
    next_col = 0
    deepest = 0
    stack: list[tuple[Hashable, int, bool]] = [(_ROOT, 0, False)]
    while stack:
        k, level, done = stack.pop()
        kids = [c for c in children.get(k, []) if c in shown]
        if done:
            place[k] = ((place[kids[0]][0] + place[kids[-1]][0]) / 2, level)
            continue
        deepest = max(deepest, level)
        if not kids:
            place[k] = (next_col, level)
            next_col += 1
            continue
        stack.append((k, level, True))
        stack.extend((c, level + 1, False) for c in reversed(kids))
    return place, deepest
