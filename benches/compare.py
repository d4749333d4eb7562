#!/usr/bin/env python3
"""The report of benches/compare.sh: reads the JSON files a run left in DIR and prints every
figure and ratio of docs/performance.md, each table as the page has it. A measurement that is
missing is said to be missing (with the reason compare.sh wrote in DIR/skipped/), never filled in.

Usage: python3 benches/compare.py DIR
"""

import json
import os
import re
import sys

# The targets of docs/performance.md.
W1_TARGET_TURNS_PER_SEC = 2_000_000
PER_TURN_COST_LIMIT = 1.5
VIDAIMOCK_PUBLISHED_RPS = 50_000
AIMOCK_TARGET_RATIO = 5.0


class Bad(Exception):
    """A file of the run that cannot be read as compare.sh writes it."""


def load(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise Bad(f"{path}: {e}") from e


def maybe(d, name):
    path = os.path.join(d, name)
    return load(path) if os.path.exists(path) else None


def num(x, digits=0):
    if x is None:
        return "-"
    return f"{x:,.{digits}f}"


def ratio(x):
    return "-" if x is None else f"{x:.2f}x"


def table(header, rows):
    cols = list(zip(*([header] + rows)))
    widths = [max(len(str(c)) for c in col) for col in cols]
    out = []
    for i, row in enumerate([header] + rows):
        cells = [str(c).ljust(w) if j == 0 else str(c).rjust(w) for j, (c, w) in enumerate(zip(row, widths))]
        out.append("  ".join(cells).rstrip())
        if i == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


def skipped(d):
    sd = os.path.join(d, "skipped")
    if not os.path.isdir(sd):
        return {}
    out = {}
    for name in sorted(os.listdir(sd)):
        with open(os.path.join(sd, name), encoding="utf-8") as f:
            out[name] = f.read().strip()
    return out


def callgrind(d, w, obs):
    """Instructions per turn of workload w, observer on/off, and the runs they are of: callgrind's
    collected count over the turns the bench's JSON reports."""
    log = os.path.join(d, f"callgrind-{w}-{obs}.log")
    if not os.path.exists(log):
        return None, 0
    with open(log, encoding="utf-8") as f:
        m = re.search(r"Collected\s*:\s*(\d+)", f.read())
    if not m:
        raise Bad(f"{log}: no `Collected :` line (did valgrind run?)")
    runs = load(os.path.join(d, f"callgrind-{w}-{obs}.json"))["workloads"]
    turns = sum(r["turns"] for r in runs)
    if turns == 0:
        raise Bad(f"{log}: the bench counted no turns")
    return int(m.group(1)) / turns, sum(r["runs"] for r in runs)


def report_turns(d, out):
    data = maybe(d, "turns.json")
    if data is None:
        out.append("turn throughput: not measured")
        return
    by = {}
    for r in data["workloads"]:
        by[(r["workload"], r["observer"])] = r
    names = sorted({w for (w, _) in by})
    out.append("## Turn throughput: W1 to W6 (median repetition)")
    rows = []
    for w in names:
        on, off = by.get((w, True)), by.get((w, False))
        rows.append([
            w.upper(),
            num(on and on["turns_per_sec"]), num(on and on["ns_per_turn"]),
            num(off and off["turns_per_sec"]), num(off and off["ns_per_turn"]),
            ratio(on and off and off["turns_per_sec"] / on["turns_per_sec"]),
        ])
    out.append(table(["workload", "on turns/s", "on ns/turn", "off turns/s", "off ns/turn", "off/on"], rows))
    counted = {(w, o): callgrind(d, w, o) for w in names for o in ("on", "off")}
    instr = {k: v[0] for k, v in counted.items()}
    if any(v is not None for v in instr.values()):
        out.append("")
        out.append("Instructions per turn (callgrind, inside the timed region; runs measured):")
        rows = [[w.upper(), num(instr[(w, "on")]), num(instr[(w, "off")]),
                 ratio(instr[(w, "on")] and instr[(w, "off")] and instr[(w, "on")] / instr[(w, "off")]),
                 f"{counted[(w, 'on')][1]} / {counted[(w, 'off')][1]}"]
                for w in names]
        out.append(table(["workload", "observer on", "observer off", "on/off", "runs on / off"], rows))
        few = [w.upper() for w in names if 0 < min(counted[(w, "on")][1], counted[(w, "off")][1]) < 10]
        if few:
            out.append(f"({', '.join(few)}: fewer than 10 runs, so one-off costs weigh in their "
                       "figures; a full run measures longer)")
    out.append("")
    out.append("Targets (observer on):")
    w1 = by.get(("w1", True))
    if w1:
        r = w1["turns_per_sec"] / W1_TARGET_TURNS_PER_SEC
        out.append(f"  W1 >= {W1_TARGET_TURNS_PER_SEC:,} turns/s: {num(w1['turns_per_sec'])} turns/s, "
                   f"{ratio(r)} of the target ({'met' if r >= 1 else 'not met'})")

    def cost(w):
        """Per-turn cost by instructions when counted, else by time."""
        if instr.get((w, "on")) is not None:
            return instr[(w, "on")], "instructions"
        r = by.get((w, True))
        return (r["ns_per_turn"], "time") if r else (None, None)

    for a, b in (("w4", "w1"), ("w3", "w2")):
        (ca, how), (cb, _) = cost(a), cost(b)
        if ca is not None and cb is not None:
            r = ca / cb
            out.append(f"  {a.upper()} per-turn cost within {PER_TURN_COST_LIMIT}x of {b.upper()}: "
                       f"{ratio(r)} by {how} ({'met' if r <= PER_TURN_COST_LIMIT else 'not met'})")


def mock_rows(data):
    return {(r["server"], r["api"], r["stream"]): r for r in data["rows"]}


def report_mock(d, out, skip):
    out.append("## mock-llm (requests per second, p50 / p99, server CPU per request)")
    first = maybe(d, "mock-aimock.json") or maybe(d, "mock-agentsim.json")
    vm = maybe(d, "mock-vidaimock.json")
    if first is None:
        out.append("not measured")
        return
    out.append(f"{first['connections']} connections, {first['seconds']} s per server and mode, "
               f"agentsim on {first['server_threads']} server thread(s)")
    a = mock_rows(first)
    v = mock_rows(vm) if vm else {}

    def cell(r):
        if r is None:
            return "-"
        cpu = r.get("cpu_us_per_request")
        cpu = "" if cpu is None else f", {cpu:.1f} µs CPU"
        err = f", {r['errors']} errors" if r["errors"] else ""
        return f"{r['rps']:,.0f} ({r['p50_us']} / {r['p99_us']} µs{cpu}{err})"

    def ratios(ours, other):
        if ours is None or other is None or other["rps"] <= 0:
            return "-", "-"
        rps = ours["rps"] / other["rps"]
        oc, tc = ours.get("cpu_us_per_request"), other.get("cpu_us_per_request")
        cpu = tc / oc if oc and tc is not None else None
        return ratio(rps), ratio(cpu)

    modes = [(api, stream) for (srv, api, stream) in a if srv == "agentsim"]
    rows = []
    for api, stream in modes:
        ours = a[("agentsim", api, stream)]
        am = a.get(("aimock", api, stream))
        ours_v = v.get(("agentsim", api, stream))
        vv = v.get(("vidaimock", api, stream))
        ar, ac = ratios(ours, am)
        vr, vc = ratios(ours_v, vv)
        if stream and vm:
            vr, vc = "paced", ""
        rows.append([f"{api}{', streamed' if stream else ''}", cell(ours), cell(am), ar, ac,
                     cell(vv) if not stream else "-", vr, vc])
    out.append(table(["API, mode", "agentsim", "aimock", "req/s ratio", "CPU ratio",
                      "VidaiMock", "req/s ratio", "CPU ratio"], rows))
    out.append("(ratio: agentsim's requests per second over the peer's; CPU ratio: the peer's CPU "
               "time per request over agentsim's server threads'. VidaiMock's ratios are of the "
               "agentsim run measured beside it; VidaiMock paces streams, so they are not compared.)")
    out.append("")
    out.append("Targets:")
    agentsim_rows = [r for (srv, _, _), r in a.items() if srv == "agentsim"]
    if agentsim_rows:
        low = min(r["rps"] for r in agentsim_rows)
        out.append(f"  VidaiMock's published {VIDAIMOCK_PUBLISHED_RPS:,} req/s: agentsim's slowest mode "
                   f"{low:,.0f} req/s, {ratio(low / VIDAIMOCK_PUBLISHED_RPS)} "
                   f"({'met' if low >= VIDAIMOCK_PUBLISHED_RPS else 'not met'})")
    ams = [a[("agentsim", api, s)]["rps"] / a[("aimock", api, s)]["rps"]
           for (api, s) in modes if ("aimock", api, s) in a and a[("aimock", api, s)]["rps"] > 0]
    if ams:
        lo, hi = min(ams), max(ams)
        out.append(f"  {AIMOCK_TARGET_RATIO:g}x aimock with validation on: {ratio(lo)} to {ratio(hi)} "
                   f"({'met' if lo >= AIMOCK_TARGET_RATIO else 'not met'})")


def report_serve(d, out):
    out.append("## serve (the async-session flow)")
    files = sorted((f for f in os.listdir(d) if re.fullmatch(r"serve-\d+\.json", f)),
                   key=lambda f: int(f[6:-5]))
    if not files:
        out.append("not measured")
        return
    rows = []
    for f in files:
        s = load(os.path.join(d, f))
        t = s["seconds"]
        ms = lambda k: f"{s[k]['p50_us'] / 1000:.1f} / {s[k]['p99_us'] / 1000:.1f} ms"
        rows.append([s["clients"], num(s["triggered"] / t, 1), num(s["answered"] / t, 1),
                     num(s["completed"] / t, 1), ms("webhook"), ms("answer"), ms("session")])
    out.append(table(["clients", "triggered/s", "answered/s", "completed/s", "webhook p50/p99",
                      "answer p50/p99", "session p50/p99"], rows))


def as_list(x):
    return x if isinstance(x, list) else [x]


def report_runtime(d, out, skip):
    out.append("## A run against your own runtime")
    r = maybe(d, "runtime.json")
    if r is None:
        out.append(f"not measured{': ' + skip['runtime'] if 'runtime' in skip else ''}")
    else:
        out.append(f"the two-turn scenario against the built-in stdlib runtime: "
                   f"{r['runs_per_second']:.1f} runs/s, {r['ms_per_run']:.0f} ms per run, agentsim's "
                   f"CPU {r['agentsim_cpu_ms_per_run']:.1f} ms per run ({100 * r['agentsim_share']:.1f}% of the run's CPU)")
    rows = []
    for name, label in (("runtime-python.json", "Python reference runtime"),
                        ("runtime-typescript.json", "TypeScript reference runtime"),
                        ("runtime-stdlib.json", "the built-in stdlib Python runtime")):
        data = maybe(d, name)
        if data is None:
            continue
        for w in as_list(data):
            rows.append([label, w["workload"].upper(), num(w["turns_per_second"]),
                         f"{w['message_ms_p50']:.1f} / {w['message_ms_p99']:.1f} ms",
                         f"{100 * w['agentsim_share']:.1f}%"])
    if rows:
        out.append("")
        out.append(table(["runtime", "workload", "model turns/s", "message p50 / p99",
                          "agentsim's CPU share"], rows))


def report(d):
    if not os.path.isdir(d):
        raise Bad(f"{d}: no such directory (run benches/compare.sh first)")
    out = []
    meta = {}
    meta_path = os.path.join(d, "meta.txt")
    if os.path.exists(meta_path):
        with open(meta_path, encoding="utf-8") as f:
            meta = dict(line.strip().split("=", 1) for line in f if "=" in line)
    out.append(f"# agentsim performance, {meta.get('mode', '?')} run, {meta.get('date', '?')}, "
               f"commit {meta.get('commit', '?')}, {meta.get('cpus', '?')} CPUs, measured in {meta.get('took', '?')}")
    skip = skipped(d)
    for section in (lambda: report_turns(d, out), lambda: report_mock(d, out, skip),
                    lambda: report_serve(d, out), lambda: report_runtime(d, out, skip)):
        out.append("")
        section()
    if skip:
        out.append("")
        out.append("## Skipped (not measured, and why)")
        for name, why in skip.items():
            out.append(f"  {name}: {why}")
    return "\n".join(out)


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    try:
        print(report(sys.argv[1]))
    except (Bad, KeyError, TypeError, ZeroDivisionError) as e:
        print(f"error: {e!r}" if not isinstance(e, Bad) else f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
