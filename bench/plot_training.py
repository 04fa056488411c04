#!/usr/bin/env python3
"""Training-result plots for docs/ (plain SVG, no dependencies beyond Python 3).

  collect --group NAME OUT_DIR [OUT_DIR...] >> docs/results/training_runs.jsonl
      One JSON line per finished run of bench/table2_mini.sh in each OUT_DIR (a directory holding
      NAME/train_log.jsonl and NAME.eval/scores.json): group, run, logged losses, ROUGE F1 with
      bootstrap intervals, mean words per generated summary.
  plot RUNS.jsonl PLOT_DIR
      Per group: the train-loss curves of its runs (loss_GROUP.svg) and ROUGE-1 with 95% intervals
      (rouge1_GROUP.svg).
  segments TABLE.md OUT.svg TITLE
      The paper's Figure 4 in miniature from a table bench/table2_mini.sh printed: ROUGE-1 (95%
      intervals) against the segment size per variant, full attention as a dashed line.
"""
import argparse
import html
import json
import os
import sys

COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#7f7f7f"]


def collect(group, out_dirs):
    for out in out_dirs:
        for entry in sorted(os.listdir(out)):
            log = os.path.join(out, entry, "train_log.jsonl")
            scores = os.path.join(out, entry + ".eval", "scores.json")
            if not (os.path.isfile(log) and os.path.isfile(scores)):
                continue
            losses = []
            with open(log) as f:
                for line in f:
                    e = json.loads(line)
                    if "loss" in e:
                        losses.append([e["step"], e["loss"]])
            rouge = json.load(open(scores))["rouge"]
            words = []
            predictions = os.path.join(out, entry + ".eval", "predictions.jsonl")
            if os.path.isfile(predictions):
                with open(predictions) as f:
                    words = [len(json.loads(line).get("prediction", "").split()) for line in f]
            print(json.dumps({
                "group": group,
                "run": entry,
                "losses": losses,
                "rouge": {t: rouge[t]["fmeasure"] for t in ("rouge1", "rouge2", "rougeL")},
                "mean_words": sum(words) / len(words) if words else None,
            }))


class Svg:
    def __init__(self, width, height):
        self.w, self.h, self.parts = width, height, []

    def add(self, s):
        self.parts.append(s)

    def text(self, x, y, s, anchor="middle", size=12, rotate=None):
        tr = f' transform="rotate({rotate} {x} {y})"' if rotate else ""
        self.add(f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}"{tr}>'
                 f'{html.escape(s)}</text>')

    def line(self, x1, y1, x2, y2, colour="#000", width=1, dash=None):
        d = f' stroke-dasharray="{dash}"' if dash else ""
        self.add(f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="{colour}" '
                 f'stroke-width="{width}"{d}/>')

    def write(self, path):
        with open(path, "w") as f:
            f.write(f'<svg xmlns="http://www.w3.org/2000/svg" width="{self.w}" height="{self.h}" '
                    f'font-family="sans-serif">\n<rect width="100%" height="100%" fill="white"/>\n')
            f.write("\n".join(self.parts))
            f.write("\n</svg>\n")


def nice_ticks(lo, hi, n=5):
    span = (hi - lo) or 1.0
    raw = span / n
    mag = 10 ** int(f"{raw:e}".split("e")[1])
    step = min((m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw), default=raw)
    start = int(lo / step) * step
    ticks, t = [], start
    while t <= hi + 1e-9:
        if t >= lo - 1e-9:
            ticks.append(round(t, 10))
        t += step
    return ticks


def axes(svg, box, xr, yr, xlabel, ylabel, title, y_ticks=True, x_ticks=True):
    left, top, right, bottom = box
    # An empty range (every run's ROUGE 0, as after a few updates) is widened rather than divided by.
    xr = xr if xr[1] > xr[0] else (xr[0], xr[0] + 1)
    yr = yr if yr[1] > yr[0] else (yr[0], yr[0] + 1)
    sx = lambda x: left + (x - xr[0]) / (xr[1] - xr[0]) * (right - left)
    sy = lambda y: bottom - (y - yr[0]) / (yr[1] - yr[0]) * (bottom - top)
    svg.line(left, bottom, right, bottom)
    svg.line(left, top, left, bottom)
    for t in nice_ticks(*yr) if y_ticks else []:
        svg.line(left - 4, sy(t), right, sy(t), "#ddd")
        svg.text(left - 7, sy(t) + 4, f"{t:g}", anchor="end", size=11)
    for t in nice_ticks(*xr) if x_ticks else []:
        if not y_ticks:
            svg.line(sx(t), top, sx(t), bottom, "#ddd")
        svg.line(sx(t), bottom, sx(t), bottom + 4)
        svg.text(sx(t), bottom + 17, f"{t:g}", size=11)
    svg.text((left + right) / 2, bottom + 36, xlabel)
    svg.text(left - 46, (top + bottom) / 2, ylabel, rotate=-90)
    svg.text((left + right) / 2, top - 14, title, size=14)
    return sx, sy


def legend(svg, x, y, names):
    for i, name in enumerate(names):
        dashed = name.endswith("(dashed)")
        svg.line(x, y + 16 * i - 4, x + 22, y + 16 * i - 4, "#000" if dashed else COLOURS[i % len(COLOURS)],
                 1.5 if dashed else 2.5, dash="6,4" if dashed else None)
        svg.text(x + 28, y + 16 * i, name, anchor="start", size=11)


def plot_losses(group, runs, path):
    svg = Svg(760, 420)
    steps = [s for r in runs for s, _ in r["losses"]]
    losses = [l for r in runs for _, l in r["losses"]]
    lo, hi = min(losses), max(losses)
    pad = 0.05 * (hi - lo or 1)
    sx, sy = axes(svg, (70, 40, 520, 360), (0, max(steps)), (lo - pad, hi + pad), "update",
                  "train loss (mean over each logged interval)", f"{group}: train loss after conversion")
    for i, r in enumerate(runs):
        pts = " ".join(f"{sx(s):.1f},{sy(l):.1f}" for s, l in r["losses"])
        svg.add(f'<polyline points="{pts}" fill="none" stroke="{COLOURS[i % len(COLOURS)]}" stroke-width="2"/>')
    legend(svg, 540, 60, [r["run"] for r in runs])
    svg.write(path)


def plot_rouge(group, runs, path):
    svg = Svg(760, 60 + 28 * len(runs) + 60)
    top, bottom = 40, 40 + 28 * len(runs)
    highs = [100 * r["rouge"]["rouge1"]["high"] for r in runs]
    sx, _ = axes(svg, (230, top, 700, bottom), (0, max(highs) * 1.1), (0, 1), "ROUGE-1 F1 x 100 (95% bootstrap interval)",
                 "", f"{group}: ROUGE-1 on the test split", y_ticks=False)
    for i, r in enumerate(runs):
        y = top + 14 + 28 * i
        f = r["rouge"]["rouge1"]
        colour = COLOURS[i % len(COLOURS)]
        svg.add(f'<rect x="{sx(0):.1f}" y="{y - 8:.1f}" width="{sx(100 * f["mid"]) - sx(0):.1f}" height="16" '
                f'fill="{colour}" fill-opacity="0.55"/>')
        svg.line(sx(100 * f["low"]), y, sx(100 * f["high"]), y, "#000", 1.5)
        for x in (f["low"], f["high"]):
            svg.line(sx(100 * x), y - 5, sx(100 * x), y + 5, "#000", 1.5)
        label = r["run"] + (f' ({r["mean_words"]:.0f} words)' if r.get("mean_words") else "")
        svg.text(222, y + 4, label, anchor="end", size=11)
    svg.write(path)


def plot(runs_file, plot_dir):
    os.makedirs(plot_dir, exist_ok=True)
    groups = {}
    with open(runs_file) as f:
        for line in f:
            r = json.loads(line)
            groups.setdefault(r["group"], []).append(r)
    for group, runs in groups.items():
        slug = "".join(c if c.isalnum() or c in "-_" else "_" for c in group)
        plot_losses(group, runs, os.path.join(plot_dir, f"loss_{slug}.svg"))
        plot_rouge(group, runs, os.path.join(plot_dir, f"rouge1_{slug}.svg"))
        print(f"wrote {plot_dir}/loss_{slug}.svg and rouge1_{slug}.svg ({len(runs)} runs)")


def plot_segments(table, path, title):
    rows = []
    with open(table) as f:
        for line in f:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) < 5 or not cells[4][:1].isdigit():
                continue
            mid, rest = cells[4].split(" [")
            low, high = rest.rstrip("]").split(", ")
            rows.append((cells[0], cells[1], float(mid), float(low), float(high)))
    sizes = sorted({int(seg) for _, seg, *_ in rows if seg != "-"})
    position = {s: i for i, s in enumerate(sizes)}
    svg = Svg(640, 400)
    top_value = max(h for *_, h in rows) * 1.15
    sx, sy = axes(svg, (70, 40, 440, 340), (-0.5, len(sizes) - 0.5), (0, top_value), "", "ROUGE-1 F1 x 100", title,
                  x_ticks=False)
    kinds = [k for k in dict.fromkeys(k for k, seg, *_ in rows if seg != "-")]
    for j, s_ in enumerate(sizes):
        svg.text(sx(j), 340 + 32, f"segment {s_}", size=11)
    for i, kind in enumerate(kinds):
        colour = COLOURS[i % len(COLOURS)]
        pts = sorted((position[int(seg)], m, lo, hi) for k, seg, m, lo, hi in rows if k == kind and seg != "-")
        svg.add('<polyline points="' + " ".join(f"{sx(x):.1f},{sy(m):.1f}" for x, m, _, _ in pts) +
                f'" fill="none" stroke="{colour}" stroke-width="2"/>')
        for x, m, lo, hi in pts:
            svg.line(sx(x), sy(lo), sx(x), sy(hi), colour, 1.5)
            svg.add(f'<circle cx="{sx(x):.1f}" cy="{sy(m):.1f}" r="3.5" fill="{colour}"/>')
    for k, seg, m, lo, hi in rows:
        if seg == "-":
            svg.line(70, sy(m), 440, sy(m), "#000", 1.5, dash="6,4")
            kinds.append(f"{k} (dashed)")
    legend(svg, 460, 60, kinds)
    svg.write(path)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect")
    c.add_argument("--group", required=True)
    c.add_argument("out_dirs", nargs="+")
    g = sub.add_parser("plot")
    g.add_argument("runs")
    g.add_argument("plot_dir")
    t = sub.add_parser("segments")
    t.add_argument("table")
    t.add_argument("svg")
    t.add_argument("title")
    a = p.parse_args()
    if a.cmd == "collect":
        collect(a.group, a.out_dirs)
    elif a.cmd == "plot":
        plot(a.runs, a.plot_dir)
    else:
        plot_segments(a.table, a.svg, a.title)


if __name__ == "__main__":
    sys.exit(main())
