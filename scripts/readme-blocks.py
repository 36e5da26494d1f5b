#!/usr/bin/env python3
"""readme-blocks.py: extracts the README's tested code blocks, so that tests run what it shows.

A fenced code block right after a line
    <!-- readme-file: NAME/FILE -->    is written to OUTDIR/NAME/FILE;
    <!-- readme-test: NAME [cwd=checkout] -->    is written to OUTDIR/NAME/run.sh (commands run
                                     in OUTDIR/NAME, or in the checkout with cwd=checkout).
Prints one line per test block: "NAME CWD" (CWD is "scratch" or "checkout").

usage: scripts/readme-blocks.py README.md OUTDIR
"""

import os
import re
import sys


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    readme, outdir = sys.argv[1], sys.argv[2]
    lines = open(readme, encoding="utf-8").read().splitlines()
    tests = []
    i = 0
    while i < len(lines):
        m = re.match(r"^<!-- readme-(file|test): (\S+)(?: cwd=(\w+))? -->$", lines[i].strip())
        if not m:
            i += 1
            continue
        kind, name, cwd = m.groups()
        j = i + 1
        while j < len(lines) and not lines[j].strip():
            j += 1
        if j >= len(lines) or not lines[j].startswith("```"):
            print(f"{readme}:{i + 1}: {lines[i].strip()} is not followed by a code block", file=sys.stderr)
            return 1
        k = j + 1
        while k < len(lines) and not lines[k].startswith("```"):
            k += 1
        body = "\n".join(lines[j + 1 : k]) + "\n"
        if kind == "file":
            path = os.path.join(outdir, name)
        else:
            path = os.path.join(outdir, name, "run.sh")
            tests.append(f"{name} {cwd or 'scratch'}")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(body)
        i = k + 1
    for t in tests:
        print(t)
    return 0 if tests else 1


if __name__ == "__main__":
    sys.exit(main())
