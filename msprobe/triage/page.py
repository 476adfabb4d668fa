"""The triage's HTML page: the answer first (culprit, module, source line, cause and advice), then each round's
evidence, the commands that reproduce it and links to its compare pages; the report's stylesheet, no script, no
network. Every name from a dump is escaped."""

from __future__ import annotations

import html
import os

from msprobe.report.html import stylesheet


def render(findings) -> str:
    esc = html.escape
    out = findings.output_dir
    cards = [("outcome", findings.outcome), ("step", str(findings.step)),
             ("rank", "-" if findings.rank is None else str(findings.rank)), ("category", findings.category or "-")]
    parts = [f"<header><h1>msprobe triage</h1><span class='muted'>{esc(out)}</span></header>",
             "<section><div class='cards'>"]
    parts += [f"<div class='card'><div class='v'>{esc(value)}</div><div class='k'>{esc(key)}</div></div>"
              for key, value in cards]
    parts.append("</div></section>")
    answer = [line for line in findings.lines() if not line.lstrip().startswith(("report:", "round "))]
    parts.append("<section><h2>Answer</h2><pre>" + esc("\n".join(answer)) + "</pre>")
    if findings.stack:
        parts.append("<h2>Stack of the culprit</h2><pre>" + esc("\n".join(findings.stack)) + "</pre>")
    parts.append("</section>")
    for found in findings.rounds:
        parts.append(f"<section><h2>{esc(found['name'])}</h2><pre>" + esc("\n".join(found["evidence"])) + "</pre>")
        runs = found.get("runs") or []
        if runs:
            parts.append("<table><tr><th>side</th><th>command</th><th>exit</th><th>seconds</th><th>stopped</th>"
                         "<th>log</th></tr>")
            parts += [f"<tr><td>{esc(r['side'])}</td><td><code>{esc(r['command'])}</code></td>"
                      f"<td>{esc(str(r['exit_status']))}</td><td>{r['seconds']}</td>"
                      f"<td>{esc(str(r['stopped_after_step']))}</td><td>{_link(r['log'], out)}</td></tr>"
                      for r in runs]
            parts.append("</table>")
        if found.get("commands"):
            parts.append("<p>To reproduce by hand:</p><pre>" + esc("\n".join(found["commands"])) + "</pre>")
        pages = [path for path in found.get("files", []) if str(path).endswith(".html")]
        if pages:
            parts.append("<p>Compare: " + ", ".join(_link(path, out) for path in pages) + "</p>")
        parts.append("</section>")
    body = "\n".join(parts)
    return (f"<!DOCTYPE html>\n<html lang='en'>\n<head>\n<meta charset='utf-8'>\n<title>msprobe triage</title>\n"
            f"<style>\n{stylesheet()}\n{_WRAP}\n</style>\n</head>\n<body>\n{body}\n</body>\n</html>\n")


# long lines (source lines, commands with their environment) wrap inside the page instead of scrolling it sideways
_WRAP = "pre { white-space: pre-wrap; overflow-wrap: anywhere; }"


def _link(path: str, out: str) -> str:
    relative = os.path.relpath(path, out)
    return f"<a href='{html.escape(relative, quote=True)}'>{html.escape(relative)}</a>"
