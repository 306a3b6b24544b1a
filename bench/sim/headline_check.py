#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""ctest sim_headline: `make run`'s screen against README.md.

Runs the simulator exactly as the Makefile's `run:` target does (its
arguments read from the Makefile, build folder replaced by a scratch one),
then checks:
  - the screen has the shape README.md's "two commands" section shows: the
    same lines in the same order once numbers, sparklines and the SVG path
    are blanked (numbers are free to change, labels and order are not);
  - wait is ahead of legacy on every headline figure, as the README says;
  - the SVG it wrote parses and holds a legacy and a wait series for each of
    the four panels.
Usage: headline_check.py <kvadmit-sim> <source dir> <scratch dir>
"""
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET

SPARK = "\u2581\u2582\u2583\u2584\u2585\u2586\u2587\u2588"


def fail(msg):
    print("sim_headline: " + msg, file=sys.stderr)
    sys.exit(1)


def make_run_args(src, scratch):
    """The simulator's arguments in the Makefile's run: target."""
    text = open(os.path.join(src, "Makefile"), encoding="utf-8").read()
    m = re.search(r"^\t@\$\(B\)/demo/bench/kvadmit-sim(.*)$", text, re.M)
    if not m:
        fail("no kvadmit-sim line in the Makefile's run: target")
    args = m.group(1).replace("$(SIM_ARGS)", "").replace("$(B)/demo", scratch)
    return args.split()


def shape(line):
    """A line with its numbers, sparklines and the SVG path blanked."""
    line = re.sub(r"(picture: ).*", r"\1PATH", line)
    line = re.sub("[%s ]*[%s][%s ]*$" % (SPARK, SPARK, SPARK), " ~", line)
    line = re.sub(r"\d[\d.,]*", "#", line)
    return " ".join(line.split())


def screen_lines(text):
    """The simulator's part of a screen: from its first line on."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("kvadmit-sim:"):
            return lines[i:]
    return []


def readme_screen(src):
    text = open(os.path.join(src, "README.md"), encoding="utf-8").read()
    sec = text.split("## The two commands", 1)
    if len(sec) < 2:
        fail('README.md has no "## The two commands" section')
    body = sec[1].split("\n## ", 1)[0]
    for block in re.findall(r"```text\n(.*?)```", body, re.S):
        lines = screen_lines(block)
        if lines:
            return lines
    fail('README.md\'s "two commands" section shows no kvadmit-sim output (```text block)')


def number(cell):
    m = re.search(r"[+-]?\d[\d.]*", cell)
    return float(m.group(0)) if m else None


def check_wait_ahead(lines):
    rows = {}
    for line in lines:
        for label in ("decode tokens/s", "share of each turn's prompt from cache",
                      "mean turn time (s)", "later turns restored"):
            if line.startswith(label):
                rows[label] = line[len(label):].split()
    if len(rows) != 4:
        fail("headline rows missing: found %s" % sorted(rows))
    legacy = {k: v[0] for k, v in rows.items()}
    wait = {k: v[1] for k, v in rows.items()}

    def share(x):
        a, b = x.split("/")
        return int(a) / int(b) if int(b) else 0.0

    ahead = [
        number(wait["decode tokens/s"]) > number(legacy["decode tokens/s"]),
        number(wait["share of each turn's prompt from cache"])
        > number(legacy["share of each turn's prompt from cache"]),
        number(wait["mean turn time (s)"]) < number(legacy["mean turn time (s)"]),
        share(wait["later turns restored"]) > share(legacy["later turns restored"]),
    ]
    if not all(ahead):
        fail("wait is not ahead of legacy on every headline figure:\n" + "\n".join(lines))


def check_svg(path):
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as e:
        fail("%s does not parse: %s" % (path, e))
    ns = "{http://www.w3.org/2000/svg}"
    panels = {g.get("id"): g for g in root.iter(ns + "g")}
    for panel in ("decode", "cache", "capacity", "waiting"):
        if panel not in panels:
            fail("%s: no %s panel" % (path, panel))
        series = {p.get("class"): p.get("points", "").split()
                  for p in panels[panel].iter(ns + "polyline")}
        for policy in ("legacy", "wait"):
            if not series.get(policy):
                fail("%s: panel %s has no %s series" % (path, panel, policy))


def main():
    sim, src, scratch = sys.argv[1:4]
    os.makedirs(scratch, exist_ok=True)
    args = make_run_args(src, scratch)
    svg = [a for i, a in enumerate(args) if i and args[i - 1] == "--svg"]
    if not svg:
        fail("the Makefile's run: target writes no SVG (--svg)")
    if os.path.exists(svg[0]):
        os.remove(svg[0])
    run = subprocess.run([sim] + args, capture_output=True, text=True, encoding="utf-8")
    if run.returncode != 0:
        fail("%s %s: exit %d\n%s" % (sim, " ".join(args), run.returncode, run.stderr))
    got = screen_lines(run.stdout)
    want = readme_screen(src)
    got_shape = [shape(x) for x in got]
    want_shape = [shape(x) for x in want]
    if got_shape != want_shape:
        for i, (g, w) in enumerate(zip(got_shape + [""] * len(want_shape),
                                       want_shape + [""] * len(got_shape))):
            if g != w:
                fail("README.md's example output is stale at line %d:\n  README: %s\n  now:    %s\n"
                     "Paste the output of `make run` into README.md (\"The two commands\").\n%s"
                     % (i + 1, w, g, run.stdout))
    check_wait_ahead(got)
    check_svg(svg[0])
    print("sim_headline: README's screen matches (%d lines), wait ahead on every headline "
          "figure, SVG parses with both series" % len(got))


if __name__ == "__main__":
    main()
