#!/usr/bin/env python3
"""ctest docs.serve_flags: the documentation keeps up with `dserve serve`.

- every flag that `dserve serve --help` lists appears in docs/*.md as the
  literal `--flag-name` (not as a prefix of a longer flag);
- the help lists at least 20 flags (so the check cannot pass on an empty or
  unparsed help text);
- every group heading of the help ("Batching and queues:", ...) is a section
  heading of docs/serving.md, the page that documents the flags by group
  (the default "Options" group, which holds only --help, is exempt);
- README.md, the front page, has at most 120 lines.

Stdlib only. Environment: DSERVE_BIN (the dserve binary; default
build/bin/dserve), DSERVE_SOURCE_DIR (the repository; default two folders up).
"""
import glob
import os
import re
import subprocess
import sys

SOURCE_DIR = os.environ.get("DSERVE_SOURCE_DIR") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", ".."))
DSERVE_BIN = os.environ.get("DSERVE_BIN") or os.path.join(SOURCE_DIR, "build", "bin", "dserve")
MIN_FLAGS = 20
README_MAX_LINES = 120

FLAG_LINE = re.compile(r"^\s+(?:-\w,)?(--[a-z][a-z0-9-]*)")
GROUP_LINE = re.compile(r"^(\S[^:]*):\s*$")


def serve_help():
    result = subprocess.run([DSERVE_BIN, "serve", "--help"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            universal_newlines=True, timeout=60)
    if result.returncode != 0:
        sys.exit("`%s serve --help` exited %d:\n%s" % (DSERVE_BIN, result.returncode, result.stdout))
    return result.stdout


def parse_help(text):
    """{group name: [flags]} in the help's order."""
    groups = {}
    current = None
    for line in text.splitlines():
        g = GROUP_LINE.match(line)
        if g and not line.startswith("Usage"):
            current = g.group(1).strip()
            groups.setdefault(current, [])
            continue
        f = FLAG_LINE.match(line)
        if f and current is not None:
            groups[current].append(f.group(1))
    return groups


def documented(flag, docs_text):
    return re.search(re.escape(flag) + r"(?![a-z0-9-])", docs_text) is not None


def main():
    failures = []
    groups = parse_help(serve_help())
    flags = [f for fs in groups.values() for f in fs]
    print("dserve serve --help: %d flags in %d groups: %s" % (
        len(flags), len(groups), "; ".join("%s (%d)" % (g, len(fs)) for g, fs in groups.items())))
    if len(flags) < MIN_FLAGS:
        failures.append("the help lists %d flags, fewer than %d: is the help parsed right?" % (len(flags), MIN_FLAGS))

    doc_files = sorted(glob.glob(os.path.join(SOURCE_DIR, "docs", "*.md")))
    if not doc_files:
        failures.append("no docs/*.md under %s" % SOURCE_DIR)
    docs_text = "\n".join(open(p, encoding="utf-8").read() for p in doc_files)
    missing = [f for f in flags if not documented(f, docs_text)]
    if missing:
        failures.append("flags of `dserve serve` missing from docs/*.md: " + ", ".join(missing))

    serving_path = os.path.join(SOURCE_DIR, "docs", "serving.md")
    headings = set()
    if os.path.exists(serving_path):
        for line in open(serving_path, encoding="utf-8"):
            h = re.match(r"^#+\s+(.*?)\s*$", line)
            if h:
                headings.add(h.group(1))
    else:
        failures.append("docs/serving.md does not exist")
    for group, group_flags in groups.items():
        if group == "Options" and set(group_flags) <= {"--help"}:
            continue
        if group not in headings:
            failures.append("help group '%s' is not a heading of docs/serving.md (want a line '## %s')" % (group, group))
    ungrouped = [f for f in groups.get("Options", []) if f != "--help"]
    if ungrouped:
        failures.append("serve flags without a ->group() in server/options.cc: " + ", ".join(ungrouped))

    readme = os.path.join(SOURCE_DIR, "README.md")
    with open(readme, encoding="utf-8") as f:
        lines = sum(1 for _ in f)
    print("README.md: %d lines (at most %d)" % (lines, README_MAX_LINES))
    if lines > README_MAX_LINES:
        failures.append("README.md has %d lines, more than %d: move detail into docs/" % (lines, README_MAX_LINES))

    for failure in failures:
        print("FAIL: " + failure)
    if failures:
        return 1
    print("OK: every serve flag documented, every help group a docs/serving.md heading")
    return 0


if __name__ == "__main__":
    sys.exit(main())
