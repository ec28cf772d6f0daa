#!/usr/bin/env python3
"""List product-code functions of 80 lines or more, longest first.

The style rule (no function of 80 lines or more in product code) counts a
function's body as rustfmt formats it: the lines strictly between the line
that opens the body (`{`) and the line that closes it, blank lines and
comments included. Test code does not count: files named `tests.rs`, files
under a `tests/` directory, items behind `#[cfg(test)]` (and the files of
`#[cfg(test)] mod name;`), and `#[test]` functions.

Rust files are scanned in relay-metrics/src, relay-metrics-python/src,
xtask/src and tools/; Python files in tools/ too (a `def`'s body, from the
line after its signature to its last line).

Usage: scripts/long-functions.py [--limit N] [ROOT]
Exits 1 when any function reaches the limit (default 80), 0 otherwise,
so it can serve as a CI gate.
"""

import argparse
import ast
import os
import re
import sys

RUST_DIRS = ["relay-metrics/src", "relay-metrics-python/src", "xtask/src", "tools"]
PYTHON_DIRS = ["tools"]
SKIP_DIRS = {"target", "tests", "__pycache__", ".git"}


def blank_rust(text):
    """Return `text` with comments, strings and char literals turned into
    spaces (newlines kept), so braces and keywords can be matched plainly."""
    out = list(text)
    i, n = 0, len(text)

    def blank(a, b):
        for k in range(a, b):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            blank(i, j)
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            blank(i, j)
            i = j
        elif (m := re.compile(r'b?r(#*)"').match(text, i)) and (
            i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")
        ):
            end = '"' + m.group(1)
            j = text.find(end, m.end())
            j = n if j < 0 else j + len(end)
            blank(i, j)
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            blank(i, j + 1)
            i = j + 1
        elif c == "'":
            # A char literal ('a', '\n', '\u{1F600}') or a lifetime ('a).
            m = re.compile(r"'(\\.[^']*|[^'\\])'").match(text, i)
            if m:
                blank(i, m.end())
                i = m.end()
            else:
                i += 1
        else:
            i += 1
    return "".join(out)


def matching(code, i, open_c, close_c):
    """Index of the bracket closing the one at `i`."""
    depth = 0
    for j in range(i, len(code)):
        if code[j] == open_c:
            depth += 1
        elif code[j] == close_c:
            depth -= 1
            if depth == 0:
                return j
    return len(code) - 1


ATTR = re.compile(r"#!?\[")
FN = re.compile(r"\bfn\s+([A-Za-z_][A-Za-z0-9_]*)")
MOD_DECL = re.compile(r"\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+([A-Za-z_][A-Za-z0-9_]*)\s*;")


def test_spans(code):
    """Spans of items marked `#[cfg(test)]` or `#[test]`, and the names of
    `#[cfg(test)] mod name;` declarations (their files are test code)."""
    spans, test_mods = [], []
    for m in ATTR.finditer(code):
        if code[m.start() + 1] == "!":
            continue
        close = matching(code, m.end() - 1, "[", "]")
        attr = re.sub(r"\s+", "", code[m.end() : close])
        if attr not in ("cfg(test)", "test") and not attr.endswith("::test"):
            continue
        # The item runs past further attributes up to its `;` or its `{...}`.
        j = close + 1
        while True:
            rest = ATTR.match(code, len(code) - len(code[j:].lstrip()))
            if not rest:
                break
            j = matching(code, rest.end() - 1, "[", "]") + 1
        decl = MOD_DECL.match(code, j)
        if decl:
            test_mods.append(decl.group(1))
            spans.append((m.start(), decl.end()))
            continue
        k, depth = j, 0
        while k < len(code):
            ch = code[k]
            if ch in "([":
                depth += 1
            elif ch in ")]":
                depth -= 1
            elif depth == 0 and ch == ";":
                break
            elif depth == 0 and ch == "{":
                k = matching(code, k, "{", "}")
                break
            k += 1
        spans.append((m.start(), k))
    return spans, test_mods


def rust_functions(path):
    """(name, first line, body lines) of each non-test function in `path`."""
    with open(path, encoding="utf-8") as f:
        code = blank_rust(f.read())
    spans, test_mods = test_spans(code)
    found = []
    for m in FN.finditer(code):
        if any(a <= m.start() <= b for a, b in spans):
            continue
        # The body is the first `{` outside (), [] and <> nesting; a `;`
        # there first means a declaration without a body (trait, extern).
        k, depth = m.end(), 0
        while k < len(code):
            ch = code[k]
            if ch in "([":
                depth += 1
            elif ch in ")]":
                depth -= 1
            elif depth == 0 and ch in "{;":
                break
            k += 1
        if k >= len(code) or code[k] == ";":
            continue
        end = matching(code, k, "{", "}")
        open_line = code.count("\n", 0, k)
        close_line = code.count("\n", 0, end)
        found.append((m.group(1), code.count("\n", 0, m.start()) + 1, max(close_line - open_line - 1, 0)))
    return found, test_mods


def python_functions(path):
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if node.name.startswith("test_"):
                continue
            first_body = node.body[0].lineno
            found.append((node.name, node.lineno, node.end_lineno - first_body + 1))
    return found


def walk(root, rel_dir, ext):
    base = os.path.join(root, rel_dir)
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        for name in sorted(filenames):
            if name.endswith(ext) and name != "tests.rs":
                yield os.path.join(dirpath, name)


def test_module_files(path, test_mods):
    """Files that hold `#[cfg(test)] mod name;` declared in `path`."""
    here = os.path.dirname(path)
    stem = os.path.splitext(os.path.basename(path))[0]
    # mod.rs, lib.rs and main.rs declare children beside themselves; a.rs in a/.
    parent = here if stem in ("mod", "lib", "main") else os.path.join(here, stem)
    for mod in test_mods:
        yield os.path.normpath(os.path.join(parent, mod + ".rs"))
        yield os.path.normpath(os.path.join(parent, mod))


def scan(root):
    results, excluded = [], []
    rust = {}
    for rel in RUST_DIRS:
        for path in walk(root, rel, ".rs"):
            rust[path] = rust_functions(path)
    for path, (_, test_mods) in rust.items():
        excluded.extend(test_module_files(path, test_mods))
    for path, (found, _) in rust.items():
        norm = os.path.normpath(path)
        if any(norm == e or norm.startswith(e + os.sep) for e in excluded):
            continue
        results.extend((lines, os.path.relpath(path, root), line, name) for name, line, lines in found)
    for rel in PYTHON_DIRS:
        for path in walk(root, rel, ".py"):
            results.extend(
                (lines, os.path.relpath(path, root), line, name)
                for name, line, lines in python_functions(path)
            )
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=80, help="lines that make a function too long")
    parser.add_argument("root", nargs="?", default=os.path.join(os.path.dirname(__file__), ".."))
    args = parser.parse_args()
    long = sorted((r for r in scan(args.root) if r[0] >= args.limit), key=lambda r: (-r[0], r[1], r[2]))
    for lines, path, line, name in long:
        print(f"{lines:5}  {path}:{line}  {name}")
    print(f"{len(long)} function(s) of {args.limit} lines or more", file=sys.stderr)
    return 1 if long else 0


if __name__ == "__main__":
    sys.exit(main())
