#!/usr/bin/env python3
"""Every function declared in outbox.h has a Doxygen comment right before it, and every
fallible call's comment names what it returns (@return or "Returns"/"@retval")."""
import re
import sys

path = sys.argv[1] if len(sys.argv) > 1 else "capi/include/outbox.h"
text = open(path, encoding="utf-8").read()
# Declarations: "OUTBOX_API <type> name(...);" possibly spanning lines.
decl = re.compile(r"OUTBOX_API\s+([^;{]*?)\b(outbox_\w+)\s*\(([^;]*?)\)\s*;", re.S)
missing, no_return = [], []
count = 0
for m in decl.finditer(text):
    count += 1
    before = text[: m.start()].rstrip()
    if not before.endswith("*/"):
        missing.append(m.group(2))
        continue
    comment = before[before.rfind("/**"):]
    if "outbox_status" in m.group(1) and not re.search(r"@return|@retval", comment):
        no_return.append(m.group(2))
for name in missing:
    print(f"no doc comment: {name}")
for name in no_return:
    print(f"doc comment does not say what it returns: {name}")
print(f"docs: {count} functions, {len(missing)} without a comment, {len(no_return)} without @return")
sys.exit(1 if missing or no_return or count == 0 else 0)
