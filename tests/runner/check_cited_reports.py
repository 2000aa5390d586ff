#!/usr/bin/env python3
"""Every measurement report the README and docs/ cite names the commit whose code it measured.

    tests/runner/check_cited_reports.py [README.md ...]

Looks for paths under bench/results/ and tests/faults/results/ in the given Markdown files (the
top-level README.md by default). Each cited report (a .md file; for a directory, the .md files in
it) must exist and say "measured the code of commit <hex>", with no "+uncommitted changes": a
figure in a report is measured by the code of the commit it names. Exit 0 when all do."""
import os
import re
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CITE = re.compile(r"(?:bench/results|tests/faults/results)/[A-Za-z0-9_./-]*")
NAMES = re.compile(r"measured the code of commit ([0-9a-f]{7,40})(\+uncommitted changes)?", re.IGNORECASE)


def reports_of(path):
    """The committed reports a cited path stands for (a directory: its tracked .md files)."""
    tracked = subprocess.run(["git", "-C", ROOT, "ls-files", "--", path], capture_output=True, text=True,
                             check=True).stdout.split()
    if os.path.isdir(os.path.join(ROOT, path)):
        return sorted(f for f in tracked if f.endswith(".md") and os.path.dirname(f) == path.rstrip("/"))
    return [path] if path.endswith(".md") else []


def main(argv):
    docs = argv[1:] or [os.path.join(ROOT, "README.md")]
    problems, checked = [], set()
    for doc in docs:
        for cited in sorted(set(CITE.findall(open(doc).read()))):
            cited = cited.rstrip(".")
            if not os.path.exists(os.path.join(ROOT, cited)):
                problems.append("%s cites %s, which does not exist" % (doc, cited))
                continue
            for report in reports_of(cited):
                if report in checked:
                    continue
                checked.add(report)
                m = NAMES.search(open(os.path.join(ROOT, report)).read())
                if m is None:
                    problems.append("%s (cited by %s) does not name the commit it measured" % (report, doc))
                elif m.group(2):
                    problems.append("%s measured uncommitted changes to %s, not a commit" % (report, m.group(1)))
    if problems:
        print("check_cited_reports.py:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 1
    print("check_cited_reports.py: %d cited report(s), each names its commit" % len(checked))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
