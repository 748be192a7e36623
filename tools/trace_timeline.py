#!/usr/bin/env python3
"""Draws one of loom's Chrome traces as a PNG timeline, with gnuplot.

    python3 tools/trace_timeline.py compare_parallel_traces/ddp.json ddp.png
    python3 tools/trace_timeline.py pipe.json pipe.png --last-step --title "1F1B, 2 stages"
    python3 tools/trace_timeline.py ddp.json ddp.png --from-ms 900 --to-ms 1800 --lanes 'rank0/*'

One row per lane (the trace's thread names: rank0/compute, rank0/comm,
stage 0 (cpu), ...; by rank, a rank's lanes in the order the trace made
them, or as --lanes lists them), one box per span, coloured by what it is
(its name without a trailing number, so every "allreduce bucket N" shares
a colour): blue, green, orange... for compute, reds and pinks for
communication, greys for the idle spans loom records (a pipeline stage's
waits). Time nobody recorded is left white: that is where a lane did
nothing. The time axis is in ms from the trace's first span, with or
without a window, so the numbers read the same in every picture of one
trace. --keep-script saves the gnuplot script, data included, to restyle
by hand (gnuplot SCRIPT remakes the PNG).

The trace is what parallel/trace.cc writes: {"traceEvents": [...]}, lanes
as "thread_name" metadata events ("ph": "M", args.name) keyed by pid and
tid, spans as complete events ("ph": "X", ts and dur in microseconds). Other
events are ignored.

Needs gnuplot (Debian: gnuplot-nox) with its pngcairo terminal, or png.
The PNG is written to a temporary file beside OUT and renamed over it, so
OUT is either the old file or the whole new one.
"""
import argparse
import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

# Colours by category, so a reader tells compute from communication before
# reading the legend. Kinds take them in order and wrap around.
PALETTES = {
    "compute": ["#4c72b0", "#55a868", "#dd8452", "#8172b3", "#64b5cd", "#937860", "#ccb974"],
    "communication": ["#c44e52", "#da8bc3", "#8c1c13", "#e377c2", "#a0522d"],
    "idle": ["#c8c8c8", "#a0a0a0", "#e0e0e0"],
}
CATEGORY_ORDER = ["compute", "communication", "idle"]
BOX_HALF_HEIGHT = 0.38  # of a lane's height of 1: a thin white line between lanes


class Failure(Exception):
    """An error the user can fix: printed as one line, status 1."""


def natural_key(text):
    """'rank10' after 'rank2': numbers in a name compare as numbers."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]


def kind_of(name):
    """A span's kind: its name without a trailing number ('allreduce bucket 3' -> 'allreduce bucket')."""
    kind = re.sub(r"\s*\d+$", "", name)
    return kind or name


def palette_of(category):
    if category in PALETTES:
        return category
    return "communication" if category.startswith("comm") else "compute"


def lane_key(event):
    """(pid, tid) as a dictionary key, whatever JSON values they are."""
    return tuple(v if isinstance(v, (int, str)) or v is None else json.dumps(v)
                 for v in (event.get("pid"), event.get("tid")))


def read_trace(path):
    """The trace's spans as (lane label, name, category, begin_us, end_us), and every lane's label."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise Failure(f"cannot read {path}: {e.strerror}")
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise Failure(f"{path} is not a Chrome trace: not JSON ({e})")
    # loom writes the object form; the bare array of events is Chrome's other form.
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    if not isinstance(events, list):
        raise Failure(f"{path} is not a Chrome trace: expected a JSON object with a 'traceEvents' list")

    thread_names = {}  # (pid, tid) -> name
    spans = []  # (pid, tid, name, category, begin_us, end_us)
    for i, e in enumerate(events):
        if not isinstance(e, dict):
            raise Failure(f"{path}: event {i} is not a JSON object")
        phase = e.get("ph")
        if phase == "M" and e.get("name") == "thread_name":
            name = (e.get("args") or {}).get("name")
            if not isinstance(name, str):
                raise Failure(f"{path}: thread_name event {i} has no args.name")
            thread_names[lane_key(e)] = name
        elif phase == "X":
            ts, dur = e.get("ts"), e.get("dur")
            if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (ts, dur)) or dur < 0:
                raise Failure(f"{path}: span event {i} ('{e.get('name')}') needs a numeric ts and a dur >= 0")
            spans.append((*lane_key(e), str(e.get("name", "?")), str(e.get("cat", "")), ts, ts + dur))
    if not spans:
        raise Failure(f"{path} holds no spans (no complete 'X' events): was tracing on for the steps?")

    # A lane is a (pid, tid). Its label is its thread name; where two processes
    # of a merged trace use the same name, the pid tells them apart.
    keys = {(s[0], s[1]) for s in spans}
    names = {k: thread_names.get(k, f"pid {k[0]} tid {k[1]}") for k in keys}
    repeated = {n for n in names.values() if list(names.values()).count(n) > 1}
    labels = {k: (f"{n} (pid {k[0]})" if n in repeated else n) for k, n in names.items()}

    # Lanes sorted by name up to their last '/', spaces ignored (rank0 before
    # rank1, rank2 before rank10; the examples' "rank 0" with "rank0/comm"),
    # then in the order the trace made them: a rank's compute lane, made
    # first, above its comm lane.
    def order(k):
        group = re.sub(r"\s+", "", labels[k].rsplit("/", 1)[0])
        tid = k[1] if isinstance(k[1], int) else 0
        return natural_key(group), tid, natural_key(labels[k])

    return [(labels[(p, t)], n, c, b, e) for p, t, n, c, b, e in spans], [labels[k] for k in sorted(keys, key=order)]


def last_step(spans):
    """The window (begin_us, end_us) of the trace's last training step, and how it was found.

    loom's traces mark steps three ways, tried in this order: a span named
    "step" (the Fashion-MNIST examples); spans named "optimizer", which end
    every step of compare_parallel's data-parallel and sharded runs; else
    the moments when no lane is busy, which separate the steps of a
    pipeline (its optimizer step is not traced).
    """
    by_lane = {}
    for s in spans:
        by_lane.setdefault(s[0], []).append(s)
    steps = [s for s in spans if s[1] == "step"]
    if steps:
        ends = {}
        for s in steps:  # the last step of each lane that has steps
            if s[0] not in ends or s[3] > ends[s[0]][3]:
                ends[s[0]] = s
        return min(s[3] for s in ends.values()), max(s[4] for s in ends.values()), "the last 'step' span"
    optimizers = [s for s in spans if s[1] == "optimizer"]
    if optimizers:
        begin, end = None, None
        for lane in {s[0] for s in optimizers}:
            opt = sorted((s for s in optimizers if s[0] == lane), key=lambda s: s[3])
            after = opt[-2][4] if len(opt) > 1 else float("-inf")
            first = min(s[3] for s in by_lane[lane] if s[3] >= after)
            begin = first if begin is None else min(begin, first)
            end = opt[-1][4] if end is None else max(end, opt[-1][4])
        return begin, end, "from the previous 'optimizer' span to the last"
    # Gaps in the union of all spans. A step boundary is a gap at least a tenth
    # as long as the longest one: the few-microsecond gaps between a stage's
    # passes are not boundaries, the optimizer's (milliseconds) are.
    ordered = sorted((s[3], s[4]) for s in spans)
    gaps, covered = [], ordered[0][1]
    for b, e in ordered[1:]:
        if b > covered:
            gaps.append((covered, b))
        covered = max(covered, e)
    if not gaps:
        return ordered[0][0], covered, "no gap between steps found: the whole trace"
    longest = max(b - a for a, b in gaps)
    start = max(b for a, b in gaps if b - a >= longest / 10)
    return start, covered, "after the last moment no lane was busy"


def overlaps(begin, end, lo, hi):
    """Whether a span shows in the window [lo, hi]: one that only touches an
    edge (the step before, ending where the window begins) does not."""
    if begin == end:
        return lo <= begin <= hi
    return end > lo and begin < hi


def pick_lanes(labels, patterns):
    """The lanes named by comma-separated patterns (fnmatch), in the patterns' order."""
    if not patterns:
        return labels
    chosen = []
    for pattern in [p.strip() for p in patterns.split(",") if p.strip()]:
        matched = [l for l in labels if fnmatch.fnmatchcase(l, pattern) and l not in chosen]
        if not matched and not any(fnmatch.fnmatchcase(l, pattern) for l in chosen):
            raise Failure(f"--lanes: '{pattern}' matches no lane (lanes: {', '.join(labels)})")
        chosen += matched
    return chosen


def quote(text):
    """A gnuplot single-quoted string: only the quote itself needs escaping (doubled)."""
    return "'" + text.replace("'", "''") + "'"


def gnuplot_script(spans, lanes, window, t0, title, size, terminal, output):
    """The whole gnuplot script, data included (datablocks), for one PNG.

    Times are ms from t0. Each kind of span is one datablock and one plot
    item (one colour, one legend entry). A row is `begin end lane "name"`;
    the plot draws it as a box from (begin, lane - h) to (end, lane + h).
    """
    lo, hi = window
    row_of = {lane: i for i, lane in enumerate(lanes)}
    # Colours go to kinds in the order they first occur in the whole trace,
    # not the window, so a kind keeps its colour in every picture of a trace
    # (forward is the first colour, backward the second, ...).
    colour_of, used = {}, {p: 0 for p in PALETTES}
    kinds = {}  # (palette, kind) -> rows in the window
    for lane, name, category, b, e in sorted(spans, key=lambda s: (s[3], s[4])):
        if lane not in row_of:
            continue
        key = (palette_of(category), kind_of(name))
        if key not in colour_of:
            colours = PALETTES[key[0]]
            colour_of[key] = colours[used[key[0]] % len(colours)]
            used[key[0]] += 1
        if not overlaps(b, e, lo, hi):
            continue
        kinds.setdefault(key, []).append(((max(b, lo) - t0) / 1000, (min(e, hi) - t0) / 1000, row_of[lane], name))
    order = sorted(kinds, key=lambda k: (CATEGORY_ORDER.index(k[0]), list(colour_of).index(k)))
    lines = [
        f"# trace_timeline.py: {len(lanes)} lanes, {sum(len(r) for r in kinds.values())} spans",
        f"set terminal {terminal} size {size[0]},{size[1]} noenhanced font 'sans,10'",
        f"set output {quote(output)}",
        f"set title {quote(title)}",
        "set xlabel 'time (ms)'",
        f"set xrange [{(lo - t0) / 1000:.3f}:{(hi - t0) / 1000:.3f}]",
        # Reversed, so the first lane is the top row.
        f"set yrange [{len(lanes) - 0.5}:-0.5]",
        "set ytics (" + ", ".join(f"{quote(l)} {i}" for i, l in enumerate(lanes)) + ") nomirror",
        "set ytics scale 0",
        "set grid xtics lc rgb '#e8e8e8'",
        "set key outside right top vertical Left reverse noautotitle",
        # A thin dark edge keeps a span visible however short, and two
        # back-to-back spans of one kind (consecutive forwards) apart.
        "set style fill solid 1.0 border lc rgb '#303030'",
    ]
    items = []
    for i, key in enumerate(order):
        palette, kind = key
        colour = colour_of[key]
        label = f"{kind} (idle)" if palette == "idle" and "wait" not in kind and "idle" not in kind else kind
        lines.append(f"# kind {i}: {kind} ({palette}); begin_ms end_ms lane name")
        lines.append(f"$kind{i} << EOD")
        for b, e, row, name in kinds[key]:
            lines.append(f'{b:.3f} {e:.3f} {row} "{name.replace(chr(34), chr(39))}"')
        lines.append("EOD")
        items.append(f"$kind{i} using (($1+$2)/2):3:1:2:($3-{BOX_HALF_HEIGHT}):($3+{BOX_HALF_HEIGHT}) "
                     f"with boxxyerror fc rgb '{colour}' title {quote(label)}")
    if not items:
        raise Failure("no spans in the window (nothing to draw)")
    lines.append("plot " + ", \\\n     ".join(items))
    return "\n".join(lines) + "\n"


def png_terminal(gnuplot):
    """pngcairo (antialiased) where this gnuplot has it, else libgd's png."""
    listing = subprocess.run([gnuplot, "-e", "set terminal"], capture_output=True, text=True)
    out = listing.stdout + listing.stderr  # gnuplot prints the list on stderr or stdout, by version
    if re.search(r"^\s*pngcairo\b", out, re.M):
        return "pngcairo"
    if re.search(r"^\s*png\b", out, re.M):
        return "png"
    raise Failure(f"{gnuplot} has neither the pngcairo nor the png terminal")


def temp_beside(path, what):
    """A new temporary file in path's folder (so that rename is atomic); its name."""
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise Failure(f"cannot write {what} {path}: it is a folder")
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix="." + os.path.basename(path) + ".", suffix=".tmp")
    except OSError as e:
        raise Failure(f"cannot write {what} {path}: {e.strerror}")
    os.close(fd)
    umask = os.umask(0)  # mkstemp makes it private; the picture is not
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)
    return tmp


def parse_size(text):
    m = re.fullmatch(r"(\d+)x(\d+)", text)
    if not m or not (100 <= int(m.group(1)) <= 10000 and 100 <= int(m.group(2)) <= 10000):
        raise argparse.ArgumentTypeError(f"expected WIDTHxHEIGHT in pixels, 100 to 10000 each, got '{text}'")
    return int(m.group(1)), int(m.group(2))


def main():
    parser = argparse.ArgumentParser(
        description="Draw a loom Chrome trace (parallel/trace.h) as a PNG timeline with gnuplot.")
    parser.add_argument("trace", help="a trace JSON (--trace FILE of the examples; compare_parallel_traces/*.json)")
    parser.add_argument("output", help="the PNG to write")
    parser.add_argument("--last-step", action="store_true",
                        help="draw only the trace's last training step (found by 'step' or 'optimizer' "
                             "spans, else by the gaps between steps)")
    parser.add_argument("--from-ms", type=float, help="start of the window, ms from the first span")
    parser.add_argument("--to-ms", type=float, help="end of the window, ms from the first span")
    parser.add_argument("--title", help="the picture's title (default: the trace's file name)")
    parser.add_argument("--lanes", help="comma-separated lane names or patterns, in the order to draw them "
                                        "(default: every lane with spans, by name): 'rank0/*,stage*'")
    parser.add_argument("--size", type=parse_size, help="WIDTHxHEIGHT in pixels (default 1000 wide, "
                                                         "the height from the number of lanes)")
    parser.add_argument("--keep-script", metavar="PATH", help="also write the gnuplot script (data included) here")
    args = parser.parse_args()
    if args.last_step and (args.from_ms is not None or args.to_ms is not None):
        parser.error("--last-step and --from-ms/--to-ms choose the window two ways: give one")
    if args.from_ms is not None and args.to_ms is not None and args.from_ms >= args.to_ms:
        parser.error(f"--from-ms ({args.from_ms:g}) must be less than --to-ms ({args.to_ms:g})")

    gnuplot = shutil.which("gnuplot")
    temps = []
    try:
        if gnuplot is None:
            raise Failure("gnuplot not found (Debian: apt-get install gnuplot-nox)")
        # The outputs first: a typo in a path costs nothing but this line.
        png_tmp = temp_beside(args.output, "the PNG")
        temps.append(png_tmp)
        script_tmp = None
        if args.keep_script:
            script_tmp = temp_beside(args.keep_script, "the script")
            temps.append(script_tmp)

        spans, labels = read_trace(args.trace)
        t0 = min(s[3] for s in spans)
        t1 = max(s[4] for s in spans)
        how = None
        if args.last_step:
            lo, hi, how = last_step(spans)
        else:
            lo = t0 if args.from_ms is None else t0 + args.from_ms * 1000
            hi = t1 if args.to_ms is None else t0 + args.to_ms * 1000
            if hi <= lo:
                raise Failure(f"the window {(lo - t0) / 1000:g}-{(hi - t0) / 1000:g} ms is empty "
                              f"(the trace runs from 0 to {(t1 - t0) / 1000:.3f} ms)")
        lanes = pick_lanes(labels, args.lanes)
        if not any(s[0] in lanes and overlaps(s[3], s[4], lo, hi) for s in spans):
            raise Failure(f"no spans between {(lo - t0) / 1000:.3f} and {(hi - t0) / 1000:.3f} ms on the lanes "
                          f"drawn (the trace runs from 0 to {(t1 - t0) / 1000:.3f} ms)")
        size = args.size or (1000, max(260, 150 + 42 * len(lanes)))
        title = args.title if args.title is not None else os.path.basename(args.trace) + \
            (" (last step)" if args.last_step else "")
        script = gnuplot_script(spans, lanes, (lo, hi), t0, title, size, png_terminal(gnuplot), png_tmp)

        run = subprocess.run([gnuplot], input=script, capture_output=True, text=True)
        with open(png_tmp, "rb") as f:
            magic = f.read(len(PNG_MAGIC))
        if run.returncode != 0 or magic != PNG_MAGIC:
            problem = next((l for l in run.stderr.splitlines() if l.strip()), "no PNG written")
            raise Failure(f"gnuplot failed: {problem.strip()}")
        if script_tmp:
            # The kept script names the final PNG, so that running it remakes the picture.
            with open(script_tmp, "w") as f:
                f.write(script.replace(f"set output {quote(png_tmp)}", f"set output {quote(args.output)}", 1))
            os.replace(script_tmp, args.keep_script)
        os.replace(png_tmp, args.output)
        temps.clear()
    except Failure as e:
        print(f"trace_timeline: {e}", file=sys.stderr)
        return 1
    finally:
        for tmp in temps:
            try:
                os.remove(tmp)
            except OSError:
                pass
    where = f", {how}" if how else ""
    print(f"trace_timeline: wrote {args.output}: {len(lanes)} lanes, "
          f"{(lo - t0) / 1000:.3f}-{(hi - t0) / 1000:.3f} ms{where}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
