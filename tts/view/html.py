"""The page shell every view shares: escaping, the stylesheet, the one inline script, small pieces.

Model output is hostile input: every text passes :func:`esc` (``html.escape`` with quotes) before
it reaches the page, attribute values included. The script is written here, inline, and reads only
the page itself (no network, no ``eval``): a click on a tree node copies the node's ``<title>``
(its step, escaped like every text) into the side panel; on the index, checkboxes and a sort order
hide and reorder table rows.
"""

from __future__ import annotations

import html
from collections.abc import Iterable

CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;color:#1d2330;background:#f6f7f9}
main{max-width:1280px;margin:0 auto;padding:18px 24px 60px}
h1{font-size:20px;margin:4px 0 2px}h2{font-size:17px;margin:0}h3{font-size:14px;margin:16px 0 6px;color:#384050}
section.cfg{background:#fff;border:1px solid #dde1e7;border-radius:8px;padding:14px 18px;margin:16px 0}
.sub{color:#5b6472;font-size:13px}.mono,pre,code{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
pre{white-space:pre-wrap;word-break:break-word;background:#f3f4f7;border-radius:5px;padding:8px 10px;margin:4px 0;
font-size:12.5px;max-height:360px;overflow:auto}
.badge{display:inline-block;border-radius:10px;padding:1px 9px;font-size:12px;font-weight:600;margin-left:6px}
.correct{background:#d8f3dc;color:#1b5e20}.wrong{background:#fde2e1;color:#9b1c1c}
.no_answer,.ungraded,.unknown{background:#eceff3;color:#4a5260}
.warn{background:#fff6d6;border:1px solid #f0d77b;border-radius:6px;padding:6px 10px;margin:8px 0;font-size:13px}
.facts{display:flex;flex-wrap:wrap;gap:6px 18px;margin:6px 0 2px;font-size:13px;color:#384050}
.facts b{color:#1d2330}
table{border-collapse:collapse;font-size:13px;margin:4px 0}
th,td{border-bottom:1px solid #e6e8ec;padding:3px 10px;text-align:left;vertical-align:top}
th{background:#f0f2f5;cursor:default}td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
.bar{height:14px;background:#8da2c0;border-radius:3px;display:inline-block;vertical-align:middle}
.bar.chosen{background:#2f6fde}.bar.gold{outline:2px solid #2e9d49}
details{margin:2px 0}summary{cursor:pointer}details.answer{margin:6px 0}
details.sample{margin:1px 0 1px 22px}details.sample summary{white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
.treebox{display:flex;gap:14px;align-items:flex-start}
.svgwrap{overflow:auto;max-height:640px;border:1px solid #e6e8ec;border-radius:6px;background:#fcfcfd;flex:1 1 auto}
.panel{flex:0 0 330px;position:sticky;top:10px}.panel pre{max-height:560px}
svg .n{cursor:pointer}svg .n:hover circle,svg .n:hover rect{stroke:#111;stroke-width:2.5}
svg .sel circle,svg .sel rect{stroke:#e8590c;stroke-width:3}
.legend span{margin-right:14px;font-size:12px;color:#4a5260}
.call{border-left:3px solid #c5cfdd;padding:2px 0 2px 10px;margin:6px 0}
.call.kept{border-left-color:#2f6fde}
a{color:#1f5fc4}tr.hide{display:none}
"""

SCRIPT = """
document.addEventListener('click', function (e) {
  var g = e.target.closest ? e.target.closest('g.n') : null;
  if (!g) return;
  var box = g.closest('.treebox'); if (!box) return;
  var old = box.querySelector('g.sel'); if (old) old.classList.remove('sel');
  g.classList.add('sel');
  var t = g.querySelector('title');
  box.querySelector('.panel pre').textContent = t ? t.textContent : '';
});
function tfilter() {
  var on = {}; document.querySelectorAll('input[data-filter]').forEach(function (c) { on[c.dataset.filter] = c.checked; });
  var rows = Array.prototype.slice.call(document.querySelectorAll('#problems tbody tr'));
  rows.forEach(function (r) {
    var hide = (on.wrong && r.dataset.wrong !== '1') || (on.contested && r.dataset.contested !== '1');
    r.classList.toggle('hide', hide);
  });
  var key = document.getElementById('sort'); if (!key) return;
  var k = key.value, body = document.querySelector('#problems tbody');
  rows.sort(function (a, b) { return k === 'id' ? a.dataset.order - b.dataset.order : b.dataset[k] - a.dataset[k]; });
  rows.forEach(function (r) { body.appendChild(r); });
}
document.addEventListener('change', function (e) { if (e.target.matches('input[data-filter], #sort')) tfilter(); });
"""


def esc(value: object) -> str:
    """``value`` as page text: every ``<``, ``>``, ``&`` and quote escaped (attributes included)."""
    return html.escape("" if value is None else str(value), quote=True)


def num(value: float | None, digits: int = 3) -> str:
    """A score as a reader wants it ("-" where there is none)."""
    if value is None:
        return "-"
    return f"{value:.{digits}g}" if abs(value) < 1000 else f"{value:,.0f}"


def badge(outcome: str | None) -> str:
    """An outcome as a coloured badge."""
    name = outcome or "unknown"
    cls = name if name in ("correct", "wrong", "no_answer", "ungraded") else "unknown"
    return f'<span class="badge {cls}">{esc(name)}</span>'


def facts(items: Iterable[tuple[str, object]]) -> str:
    """A row of ``label value`` facts; items whose value is None are left out."""
    cells = [f"<span>{esc(label)} <b>{esc(value)}</b></span>" for label, value in items if value is not None]
    return f'<div class="facts">{"".join(cells)}</div>' if cells else ""


def warn(text: str) -> str:
    """A yellow note (what an older trace lacks, what was collapsed)."""
    return f'<div class="warn">{esc(text)}</div>'


def pre(text: object) -> str:
    """Text as written, escaped, wrapped."""
    return f"<pre>{esc(text)}</pre>"


def page(title: str, body: str) -> str:
    """A whole page: doctype, inline stylesheet, ``body`` and the one inline script. Nothing is fetched."""
    return (f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{esc(title)}</title><style>{CSS}</style></head>\n<body><main>\n{body}\n</main>"
            f"<script>{SCRIPT}</script></body></html>\n")
