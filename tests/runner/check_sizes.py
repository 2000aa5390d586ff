#!/usr/bin/env python3
"""One idea a file, one job a function: the size limits of issue 15, checked on the tracked tree.

    tests/runner/check_sizes.py [--function-limit N] [--file-limit N] [--root DIR]

- No function in core/, capi/ or cli/ is over 120 lines (a function: a line at column 0 that
  starts a signature, to the closing brace at column 0; lambdas count toward their function).
- No function of the faces, python/outbox/*.py and node/lib/*.js, is over 40 lines (Python: from
  `def` to its last line, less its docstring; JavaScript: from a function's or method's first line
  to its closing brace at the same indent).
- A face is thin (issue 29): the files of each folder of FACE_TOTALS together (blank lines, comments,
  docstrings and type stubs included, as `wc -l` counts them) are at most its number of lines.
- No source file outside tests/ is over 1,000 lines, but for the one public header
  capi/include/outbox.h (DESIGN.md: one header, the C ABI): declarations and their documentation,
  whose size follows the API's; every function in it is checked for its doc comment instead
  (tests/abi/check_docs.py).
Exit 0 when all hold; otherwise each offender is printed and the exit status is 1."""
import argparse
import ast
import os
import re
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SOURCE = (".c", ".cc", ".cpp", ".h", ".hpp", ".py", ".js", ".ts", ".sh", ".php")
PUBLIC_HEADERS = {"capi/include/outbox.h"}
FACE_TOTALS = {  # a face's folder: the most lines its tracked files may have together
    "python/outbox": 1500,
    "node/lib": 700,
}
NOT_A_FUNCTION = re.compile(r"^(namespace|struct|class|enum|union|extern|typedef|using|template|#|//|/\*|\*)")


def tracked():
    out = subprocess.run(["git", "-C", ROOT, "ls-files"], capture_output=True, text=True, check=True).stdout
    return [f for f in out.split("\n") if f]


def long_functions(path, limit):
    lines = open(os.path.join(ROOT, path), errors="replace").read().split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if line and re.match(r"[A-Za-z_\[]", line) and "(" in line and not NOT_A_FUNCTION.match(line):
            k = i
            while k < len(lines) and k < i + 8 and not lines[k].rstrip().endswith(("{", ";")):
                k += 1
            if k < len(lines) and lines[k].rstrip().endswith("{"):
                j = k + 1
                while j < len(lines) and not lines[j].startswith("}"):
                    j += 1
                if j - i + 1 > limit:
                    yield i + 1, j - i + 1, line.strip()
                i = j
        i += 1


def long_python_functions(path, limit):
    tree = ast.parse(open(os.path.join(ROOT, path)).read(), path)
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            n = node.end_lineno - node.lineno + 1
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                n -= first.end_lineno - first.lineno + 1
            if n > limit:
                yield node.lineno, n, node.name


JS_START = re.compile(r"^(\s*)(?:(?:async\s+)?function\b|(?:static\s+)?(?:async\s+)?\*?\s*(?:get\s+|set\s+)?"
                      r"[\w$]+\s*\(.*\)\s*\{\s*$|(?:const|let)\s+[\w$]+\s*=\s*(?:async\s*)?"
                      r"(?:\([^)]*\)|[\w$]+)\s*=>\s*\{\s*$)")
JS_KEYWORDS = {"if", "for", "while", "switch", "catch", "return", "else", "try", "do"}


def long_js_functions(path, limit):
    lines = open(os.path.join(ROOT, path)).read().split("\n")
    for i, line in enumerate(lines):
        m = JS_START.match(line)
        if not m or line.strip().split("(")[0].split()[-1:] and line.strip().split("(")[0].split()[-1] in JS_KEYWORDS:
            continue
        indent = m.group(1)
        for k in range(i + 1, len(lines)):
            t = lines[k]
            if t.startswith(indent + "}") and (len(t) == len(indent) + 1 or t[len(indent) + 1] in ");,"):
                if k - i + 1 > limit:
                    yield i + 1, k - i + 1, line.strip()
                break


def main(argv):
    global ROOT
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--function-limit", type=int, default=120)
    ap.add_argument("--file-limit", type=int, default=1000)
    ap.add_argument("--face-function-limit", type=int, default=40)
    ap.add_argument("--root", default=ROOT, help="the checkout to read (default: this script's)")
    args = ap.parse_args(argv[1:])
    ROOT = os.path.abspath(args.root)
    files = tracked()
    problems = 0
    functions = 0
    for f in files:
        if f.split("/")[0] in ("core", "capi", "cli") and f.endswith((".c", ".cc", ".cpp", ".h", ".hpp")):
            functions += 1
            for line, n, sig in long_functions(f, args.function_limit):
                print(f"sizes: {f}:{line}: a function of {n} lines (limit {args.function_limit}): {sig}")
                problems += 1
    faces = [f for f in files if re.match(r"(python/outbox/[^/]+\.py|node/lib/[^/]+\.js)$", f)]
    for f in faces:
        check = long_python_functions if f.endswith(".py") else long_js_functions
        for line, n, sig in check(f, args.face_function_limit):
            print(f"sizes: {f}:{line}: a function of {n} lines (limit {args.face_function_limit}): {sig}")
            problems += 1
    for folder, limit in FACE_TOTALS.items():
        n = sum(open(os.path.join(ROOT, f), "rb").read().count(b"\n") for f in files
                if os.path.dirname(f) == folder and os.path.isfile(os.path.join(ROOT, f)))
        if n > limit:
            print(f"sizes: {folder}/*: {n} lines together (limit {limit})")
            problems += 1
    sources = [f for f in files if f.endswith(SOURCE) and not f.startswith("tests/") and "node_modules/" not in f
               and f not in PUBLIC_HEADERS]
    for f in sources:
        n = sum(1 for _ in open(os.path.join(ROOT, f), errors="replace"))
        if n > args.file_limit:
            print(f"sizes: {f}: {n} lines (limit {args.file_limit})")
            problems += 1
    print(f"sizes: {functions} files of core/, capi/, cli/ read for functions over {args.function_limit} lines, "
          f"{len(faces)} of python/outbox and node/lib for functions over {args.face_function_limit}, "
          f"{len(FACE_TOTALS)} face folder(s) for their total, "
          f"{len(sources)} source files outside tests/ for files over {args.file_limit}: {problems} over")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
