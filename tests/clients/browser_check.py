"""Renders `agentsim run --html` pages of a passing and a failing run in a real browser (Debian's
chromium, headless), takes screenshots, and reads back through the browser's own layout that the
SVG timeline, the agent tree and the sequence diagram rendered: their boxes have a size, every marker and arrow
has one, and the failing page shows its violation.

Usage: python tests/clients/browser_check.py path/to/agentsim [path/to/chromium]
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

AGENTSIM = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else "target/release/agentsim"
CHROMIUM = sys.argv[2] if len(sys.argv) > 2 else (shutil.which("chromium") or "chromium")

# Appended to a copy of the page: measures the rendered boxes and writes them into the DOM, which
# the browser then dumps. (The page itself has no script.)
MEASURE = """
<script>
function box(el) { const b = el.getBBox(); return [Math.round(b.width), Math.round(b.height)]; }
const out = {};
for (const id of ["timeline", "tree", "sequence"]) {
  const svg = document.getElementById(id);
  out[id] = svg ? box(svg) : null;
}
out.marks = [...document.querySelectorAll("#timeline circle.mark")].map(box);
out.depth = [...document.querySelectorAll("#timeline polyline.depth")].map(box);
out.arrows = [...document.querySelectorAll("#sequence g.message line")].map(box);
out.participants = [...document.querySelectorAll("#sequence g.participant text")].map(t => t.textContent);
out.violation = [...document.querySelectorAll("#timeline g.violation line")].map(box);
out.alarm = [...document.querySelectorAll("#sequence g.note.alarm text")].map(t => t.textContent);
out.nodes = [...document.querySelectorAll("#tree g.node")].map(g => [g.dataset.status, ...box(g.querySelector("rect")), g.querySelector("rect").getBBox().x]);
out.edges = [...document.querySelectorAll("#tree path.edge")].map(box);
out.verdict = document.getElementById("verdict").className;
const pre = document.createElement("pre");
pre.id = "measured";
pre.textContent = JSON.stringify(out);
document.body.appendChild(pre);
</script>
"""


def chromium(*args):
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", *args]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def render(page, tmp, name):
    shot = os.path.join(tmp, name + ".png")
    chromium("--window-size=1100,1400", "--screenshot=" + shot, "file://" + page)
    with open(shot, "rb") as f:
        png = f.read()
    assert png[:8] == b"\x89PNG\r\n\x1a\n", "a PNG"
    width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    assert (width, height) == (1100, 1400), (width, height)
    assert len(png) > 30_000, "a screenshot with something drawn (%d bytes)" % len(png)
    with open(page) as f:
        html = f.read()
    measured = os.path.join(tmp, name + "-measured.html")
    with open(measured, "w") as f:
        f.write(html.replace("</body>", MEASURE + "</body>"))
    dom = chromium("--dump-dom", "file://" + measured)
    found = re.search(r'<pre id="measured">(.*?)</pre>', dom, re.S)
    assert found, "the browser ran the measurement"
    return json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&")
                      .replace("&lt;", "<").replace("&gt;", ">"))


def run(scenario_yaml, tmp, name):
    path = os.path.join(tmp, name + ".yaml")
    with open(path, "w") as f:
        f.write(scenario_yaml)
    page = os.path.join(tmp, name + ".html")
    out = subprocess.run([AGENTSIM, "run", path, "--html", page], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode in (0, 1), out.stderr
    return page, out.returncode


SCENARIO = """
name: research skill with a search
agents:
  research: { kind: skill }
llm:
  main:
    - use_skill: { skill: research, message: look it up }
    - Done.
  research:
    - tool_use: { name: search, input: { q: x } }
    - complete: found
tools:
  search: { result: ok, after: 2s }
steps:
  - user: find it
"""


def main():
    with tempfile.TemporaryDirectory(prefix="agentsim-browser-") as tmp:
        page, code = run(SCENARIO, tmp, "passing")
        assert code == 0
        m = render(page, tmp, "passing")
        assert m["timeline"][0] > 500 and m["timeline"][1] > 50, m
        assert m["sequence"][0] > 500 and m["sequence"][1] > 200, m
        assert len(m["marks"]) >= 10 and all(w > 0 and h > 0 for w, h in m["marks"]), m
        assert m["depth"] and all(w > 500 for w, _ in m["depth"]), m
        assert len(m["arrows"]) >= 10 and all(w > 0 for w, _ in m["arrows"]), m
        assert m["participants"] == ["user", "main", "skill:research", "llm", "tools"], m
        assert m["violation"] == [] and m["alarm"] == [], m
        assert m["verdict"] == "verdict passed", m
        # The agent tree: main and the skill nested under it, both completed, with an edge.
        assert m["tree"][0] > 200 and m["tree"][1] > 30, m
        assert [n[0] for n in m["nodes"]] == ["completed", "completed"], m
        assert all(w > 100 and h > 10 for _, w, h, _ in m["nodes"]), m
        assert m["nodes"][1][3] > m["nodes"][0][3], "the child is indented: %s" % m
        assert len(m["edges"]) == 1 and m["edges"][0][1] > 0, m
        print("ok   a passing run's page: timeline, agent tree and sequence rendered, %d marks, "
              "%d arrows, %d agents" % (len(m["marks"]), len(m["arrows"]), len(m["nodes"])))

        broken = SCENARIO.replace("steps:", "settings: { planted_bug: double-delivery }\nsteps:")
        page, code = run(broken, tmp, "failing")
        assert code == 1
        m = render(page, tmp, "failing")
        assert len(m["violation"]) == 2 and all(w > 0 for w, _ in m["violation"]), m
        assert m["alarm"] and m["alarm"][0].startswith("violation ["), m
        assert m["verdict"] == "verdict failed", m
        print("ok   a failing run's page: the violation drawn on the timeline and in the sequence")


if __name__ == "__main__":
    main()
