"""The pieces of the --html pages (html.py builds the reports from them): the page with its
style and script, tables, and the charts as inline SVG. Strings only, every text escaped.

Tables are real `<table>`s: a header click sorts by the exact value (`data-v`, also what
"copy as TSV" copies), so human units on screen never round what is sorted or copied.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Iterable, Sequence
from typing import Any

from .units import human_bytes

# A cell: text, or (text, exact value) whose exact value sorts and copies, or (text, exact, class).
Cell = Any

CSS = """
:root{color-scheme:light dark;--fg:#1f2328;--muted:#59636e;--line:#d1d9e0;--bg:#fff;
--alt:#f6f8fa;--c0:#0969da;--c1:#bf3989;--c2:#9a6700;--c3:#1a7f37;--c4:#8250df;--c5:#57606a;
--free:#dafbe1;--over:#cf222e}
@media (prefers-color-scheme:dark){:root{--fg:#e6edf3;--muted:#9198a1;--line:#3d444d;
--bg:#0d1117;--alt:#151b23;--c0:#4493f8;--c1:#db61a2;--c2:#d29922;--c3:#3fb950;--c4:#ab7df8;
--c5:#9198a1;--free:#12261e;--over:#f85149}}
*{box-sizing:border-box}
body{margin:0 auto;max-width:1240px;padding:1rem 1.25rem 3rem;color:var(--fg);background:var(--bg);
font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",Arial,sans-serif}
h1{font-size:1.35rem;margin:.3rem 0;overflow-wrap:anywhere}
h2{font-size:1.1rem;margin:1.8rem 0 .5rem;padding-bottom:.2rem;border-bottom:1px solid var(--line)}
p{margin:.3rem 0;overflow-wrap:anywhere}
.muted,caption,figcaption small{color:var(--muted)}
.wrap{max-width:100%;overflow-x:auto}
table{border-collapse:collapse;width:100%;font-variant-numeric:tabular-nums}
th,td{padding:.22rem .45rem;border-bottom:1px solid var(--line);text-align:left;
vertical-align:top;overflow-wrap:break-word}
td.m{overflow-wrap:anywhere;min-width:9rem}
thead th{background:var(--alt);position:sticky;top:0}
tbody tr:hover{background:var(--alt)}
.n{text-align:right}
td.n{white-space:nowrap}
table.wide{font-size:.75rem}
table.wide th,table.wide td{padding:.15rem .2rem;overflow-wrap:anywhere}
table.wide td.n{white-space:normal}
table.wide th[scope=row]{min-width:8rem}
code,.m{font-family:ui-monospace,"DejaVu Sans Mono",Menlo,Consolas,monospace;font-size:.9em}
caption{caption-side:bottom;text-align:left;padding:.3rem 0}
table.sortable th{cursor:pointer;user-select:none}
th[aria-sort=ascending]::after{content:" ▲"}
th[aria-sort=descending]::after{content:" ▼"}
.best{font-weight:700;color:var(--c3)}
.bad{font-weight:700;color:var(--over)}
.ok{font-weight:700;color:var(--c3)}
.ew{color:var(--muted)}
button.copy{font:inherit;font-size:.85em;margin:.2rem 0;padding:.1rem .5rem;cursor:pointer}
.charts{display:grid;grid-template-columns:repeat(auto-fit,minmax(min(100%,26rem),1fr));
gap:1rem 2rem}
figure{margin:0;min-width:0}
figcaption{font-weight:600;margin-bottom:.3rem}
svg.chart{display:block;width:100%;max-width:640px;height:auto}
svg.chart text{fill:var(--fg);font-size:13px}
svg.chart .track{fill:var(--alt)}
svg.chart .free{fill:var(--free)}
svg.chart .cap{stroke:var(--over);stroke-width:2}
.s0{fill:var(--c0)}.s1{fill:var(--c1)}.s2{fill:var(--c2)}.s3{fill:var(--c3)}.s4{fill:var(--c4)}
.s5{fill:var(--c5)}
ul.notes{padding-left:1.2rem}
footer{margin-top:2rem;color:var(--muted);font-size:.85em}
""".strip()

# Sort a table by a header click (exact values: integers as BigInt, so 2^63 and beyond compare
# right), and copy a table as tab-separated exact values.
SCRIPT = """
(function(){
function val(c){return c.dataset.v!==undefined?c.dataset.v:c.innerText.trim()}
function num(a,b){var ia=/^-?\\d+$/.test(a),ib=/^-?\\d+$/.test(b);
if(ia&&ib){var x=BigInt(a),y=BigInt(b);return x<y?-1:x>y?1:0}
var fa=parseFloat(a),fb=parseFloat(b);if(isNaN(fa))return isNaN(fb)?0:1;if(isNaN(fb))return -1;
return fa-fb}
document.querySelectorAll("table.sortable").forEach(function(t){
t.querySelectorAll("thead th").forEach(function(th,i){th.tabIndex=0;th.title="sort";
function go(){var asc=th.getAttribute("aria-sort")!=="ascending",b=t.tBodies[0];
t.querySelectorAll("thead th").forEach(function(h){h.removeAttribute("aria-sort")});
th.setAttribute("aria-sort",asc?"ascending":"descending");
var rows=Array.prototype.slice.call(b.rows),n=th.classList.contains("n");
rows.sort(function(r,s){var x=val(r.cells[i]),y=val(s.cells[i]);
var c=n?num(x,y):x.localeCompare(y,undefined,{numeric:true});return asc?c:-c});
rows.forEach(function(r){b.appendChild(r)})}
th.addEventListener("click",go);
th.addEventListener("keydown",function(e){
if(e.key==="Enter"||e.key===" "){e.preventDefault();go()}})
})});
document.querySelectorAll("button.copy").forEach(function(btn){btn.addEventListener("click",
function(){var t=document.getElementById(btn.dataset.table);
var tsv=Array.prototype.map.call(t.rows,function(r){return Array.prototype.map.call(r.cells,
val).join("\\t")}).join("\\n");
function done(){btn.textContent="copied"}
function fallback(){var a=document.createElement("textarea");a.value=tsv;
document.body.appendChild(a);a.select();document.execCommand("copy");a.remove();done()}
if(navigator.clipboard){navigator.clipboard.writeText(tsv).then(done,fallback)}else{fallback()}
})});
})();
""".strip()


def esc(x: Any) -> str:
    return html.escape(str(x), quote=True)


def page(title: str, subtitle: str, sections: Iterable[str], data: Any = None) -> str:
    """The whole document. `data` (the --json document) rides along, inert, for scripts."""
    from .. import __version__

    body = "\n".join(sections)
    blob = ""
    if data is not None:  # JSON inside <script>: escape <, >, & so no text can close the tag
        js = json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        js = js.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
        blob = f'<script type="application/json" id="shapecalc-data">{js}</script>\n'
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
        # no fetch of any kind, even if something slipped into the page
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
        "style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:\">\n"
        f"<title>{esc(title)}</title>\n<style>\n{CSS}\n</style>\n</head>\n<body>\n"
        f"<header><h1>{esc(title)}</h1>\n<p class=\"muted\">{esc(subtitle)}</p></header>\n"
        f"<main>\n{body}\n</main>\n{blob}"
        f"<footer>shapecalc {esc(__version__)} · bytes in binary units (KiB, MiB, GiB = 2³⁰ B), "
        "FLOPs and counts in decimal ones; a click on a column header sorts by the exact values"
        f"</footer>\n<script>\n{SCRIPT}\n</script>\n</body>\n</html>\n"
    )


def section(title: str, *parts: str, id_: str | None = None) -> str:
    ident = f' id="{esc(id_)}-section"' if id_ else ""  # the bare id is its table's
    return f"<section{ident}>\n<h2>{esc(title)}</h2>\n" + "\n".join(parts) + "\n</section>"


def table(tid: str, header: Sequence[str], rows: Iterable[Sequence[Cell]], numeric: set[int],
          caption: str = "", sortable: bool = True, mono: set[int] | None = None,
          wide: bool = False) -> str:
    """A <table>: `numeric` columns right-aligned and sorted by number; a cell is text, or
    (text, exact) whose exact value sorts and copies, or (text, exact, css class); `mono`
    columns in a fixed-width font; a `wide` table (many columns) in a smaller font, its numbers
    allowed to wrap, so that it fits the window rather than scroll."""
    mono = mono or set()
    num_attr = ' class="n"'
    classes = " ".join(k for k in ("sortable" if sortable else "", "wide" if wide else "") if k)
    sort_attr = f' class="{classes}"' if classes else ""
    # a break allowed after each underscore of a key (<wbr> is not copied with the text)
    head = "".join(f'<th scope="col"{num_attr if i in numeric else ""}>'
                   f'{esc(h).replace("_", "_<wbr>")}</th>' for i, h in enumerate(header))
    out = [f'<button class="copy" type="button" data-table="{esc(tid)}">copy as TSV</button>',
           f'<div class="wrap"><table id="{esc(tid)}"{sort_attr}>']
    if caption:
        out.append(f"<caption>{esc(caption)}</caption>")
    out.append(f"<thead><tr>{head}</tr></thead><tbody>")
    for row in rows:
        cells = []
        for i, cell in enumerate(row):
            text, exact, extra = (*cell, None, "")[:3] if isinstance(cell, tuple) else (
                cell, None, "")
            klass = " ".join(k for k in ("n" if i in numeric else "", "m" if i in mono else "",
                                         extra) if k)
            attrs = f' class="{klass}"' if klass else ""
            if exact is not None:
                attrs += f' data-v="{esc(_exact(exact))}"'
                if str(text) != _exact(exact):
                    attrs += f' title="{esc(_exact(exact))}"'
            tag = "th" if i == 0 else "td"
            scope = ' scope="row"' if i == 0 else ""
            cells.append(f"<{tag}{scope}{attrs}>{esc(text)}</{tag}>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</tbody></table></div>")
    return "\n".join(out)


def _exact(v: Any) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, float):
        return "" if math.isnan(v) else repr(v)
    return str(v)


# -- charts ----------------------------------------------------------------------------------------
W = 600  # the viewBox width; the SVG scales to its column


def bars_svg(title: str, items: Sequence[tuple[str, int | float]], unit: Any) -> str:
    """Horizontal bars, one per item, as shares of their sum, each with its value and percent."""
    items = [(k, v) for k, v in items if v]
    total = sum(v for _, v in items) or 1
    row, label_w, text_w = 26, 190, 150
    bar_w = W - label_w - text_w
    h = row * len(items) + 6
    out = [f'<figure><figcaption>{esc(title)}</figcaption>',
           f'<svg class="chart" viewBox="0 0 {W} {h}" role="img" '
           f'xmlns="http://www.w3.org/2000/svg"><title>{esc(title)}</title>']
    for i, (label, v) in enumerate(items):
        y = 3 + i * row
        share = v / total
        w = max(bar_w * share, 1.0)
        out.append(
            f'<text x="0" y="{y + 17}">{esc(_clip(label, 26))}</text>'
            f'<rect class="track" x="{label_w}" y="{y + 4}" width="{bar_w}" height="16"/>'
            f'<rect class="s{i % 6}" x="{label_w}" y="{y + 4}" width="{w:.1f}" height="16">'
            f"<title>{esc(label)}: {esc(_exact(v))}</title></rect>"
            f'<text x="{W}" y="{y + 17}" text-anchor="end">{esc(unit(v))} · '
            f"{100 * share:.1f} %</text>"
        )
    out.append("</svg></figure>")
    return "".join(out)


def stacked_svg(title: str, parts: Sequence[tuple[str, int]], capacity: int | None = None
                ) -> str:
    """One stacked bar of `parts` (with a legend), scaled to `capacity` when given: the rest of
    it is free, and a total above it is drawn past a red capacity line."""
    parts = [(k, v) for k, v in parts if v]
    total = sum(v for _, v in parts)
    scale = max(total, capacity or 0) or 1
    bar_w, legend_row = W, 22
    h = 34 + legend_row * (len(parts) + (1 if capacity else 0)) + 4
    out = [f'<figure><figcaption>{esc(title)}</figcaption>',
           f'<svg class="chart" viewBox="0 0 {W} {h}" role="img" '
           f'xmlns="http://www.w3.org/2000/svg"><title>{esc(title)}</title>',
           f'<rect class="{"free" if capacity else "track"}" x="0" y="4" width="{bar_w}" '
           'height="24"/>']
    x = 0.0
    for i, (label, v) in enumerate(parts):
        w = bar_w * v / scale
        out.append(f'<rect class="s{i % 6}" x="{x:.1f}" y="4" width="{max(w, 1.0):.1f}" '
                   f'height="24"><title>{esc(label)}: {v:,} B</title></rect>')
        x += w
    if capacity and total > capacity:
        cx = bar_w * capacity / scale
        out.append(f'<line class="cap" x1="{cx:.1f}" y1="0" x2="{cx:.1f}" y2="32"/>')
    y = 34
    legend = [(f"s{i % 6}", label, v) for i, (label, v) in enumerate(parts)]
    if capacity:
        legend.append(("free", "free" if total <= capacity else "over capacity",
                       abs(capacity - total)))
    for klass, label, v in legend:
        share = f" · {100 * v / capacity:.1f} % of capacity" if capacity else (
            f" · {100 * v / (total or 1):.1f} %")
        out.append(f'<rect class="{klass}" x="0" y="{y + 4}" width="14" height="14"/>'
                   f'<text x="22" y="{y + 16}">{esc(label)}: {esc(human_bytes(v))}'
                   f"{esc(share)}</text>")
        y += legend_row
    out.append("</svg></figure>")
    return "".join(out)


def _clip(s: str, n: int) -> str:
    return s if len(s) <= n else s[: n - 1] + "…"


def charts(*figures: str) -> str:
    return '<div class="charts">' + "".join(figures) + "</div>"
