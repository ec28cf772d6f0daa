#!/usr/bin/env python3
"""Checks scripts/long-functions.py on a small tree: what counts, what is test code, and the
body lines of a function whose strings, chars and comments hold braces."""

import os
import subprocess
import sys
import tempfile

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "long-functions.py")


def body(n):
    return "".join(f"    let x{i} = {i};\n" for i in range(n))


LIB = f"""
fn long_one() {{
{body(80)}}}
fn short_one() {{
{body(79)}}}
fn tricky<'a, T>(x: &'a str) -> impl Fn() -> u8
where
    T: Clone,
{{
    let s = "}}}}}}";
    let r = r#"{{ "}}" "#;
    let c = '}}';
    let b = b'{{';
    // }} }}
    /* {{ /* nested }} */ }} */
{body(80)}}}
#[cfg(test)]
fn test_helper() {{
{body(90)}}}
#[test]
#[ignore = "x"]
fn a_test() {{
{body(90)}}}
#[cfg(test)]
mod tests {{
    fn inner() {{
{body(90)}    }}
}}
#[cfg(test)]
mod helpers;
trait T {{
    fn declared(&self);
    fn defaulted(&self) {{
{body(85)}    }}
}}
"""


def main():
    with tempfile.TemporaryDirectory() as root:
        src = os.path.join(root, "relay-metrics", "src")
        os.makedirs(os.path.join(src, "tests"))
        os.makedirs(os.path.join(root, "tools"))
        files = {
            "relay-metrics/src/lib.rs": LIB,
            "relay-metrics/src/helpers.rs": "fn in_a_test_module_file() {\n" + body(100) + "}\n",
            "relay-metrics/src/tests.rs": "fn in_tests_rs() {\n" + body(100) + "}\n",
            "relay-metrics/src/tests/x.rs": "fn under_tests() {\n" + body(100) + "}\n",
            "tools/t.py": "def long_py():\n"
            + "".join(f"    x{i} = {i}\n" for i in range(80))
            + "def short_py():\n    pass\n",
        }
        for path, text in files.items():
            with open(os.path.join(root, path), "w", encoding="utf-8") as f:
                f.write(text)
        found = subprocess.run(
            [sys.executable, SCRIPT, root], capture_output=True, text=True, check=False
        )
        listed = [line.split() for line in found.stdout.splitlines()]
        got = [(int(lines), place.split(":")[0], name) for lines, place, name in listed]
        want = [
            (86, "relay-metrics/src/lib.rs", "tricky"),
            (85, "relay-metrics/src/lib.rs", "defaulted"),
            (80, "relay-metrics/src/lib.rs", "long_one"),
            (80, "tools/t.py", "long_py"),
        ]
        assert got == want, f"listed {got}, expected {want}\n{found.stderr}"
        assert found.returncode == 1, f"exit {found.returncode} with long functions"
        clean = subprocess.run(
            [sys.executable, SCRIPT, "--limit", "200", root], capture_output=True, check=False
        )
        assert clean.returncode == 0, f"exit {clean.returncode} with none at --limit 200"
    print("long-functions.py: ok")


if __name__ == "__main__":
    main()
