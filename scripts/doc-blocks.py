#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""The code blocks of README.md and docs/, as users copy them: C++ blocks compile, Python blocks
run.

    doc-blocks.py cpp OUTDIR [--without WORD]   one .cpp per page in OUTDIR (tests/CMakeLists.txt
                                                compiles them); blocks naming WORD are left out
    doc-blocks.py python                        runs every Python block, each in a new folder

A block is taken as written. What it uses from the page's prose (a model `net`, an input `x`)
is declared by a comment right above its fence, which Markdown does not show:

    <!-- doc-test: torch::nn::Linear net(4, 4); -->

`continues` at its start makes the block part of the page's block above it (one program told in
steps). A C++ block's `#include`s go to the top of its file; its structs, classes, functions,
namespace aliases and module macros at brace depth 0 stay at namespace scope; every other line
goes, in order, into a function, after the declarations of its comment. A block that defines
`main` is a whole program, kept at global scope (at most one a page). Fragments get what their
page has its reader include: modhooks (with `aoti.h`, `executorch.h` and `dist.h` where those
components are built), libtorch's C++ API with TorchScript, and a few standard headers.
"""
from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
NOTE = re.compile(r"<!--\s*doc-test:(.*?)-->", re.S)
# A line at depth 0 that starts a declaration kept at namespace scope.
FILE_SCOPE = re.compile(
    r"^(struct|class|namespace|template|MODHOOKS_MODULE\(|TORCH_MODULE\()"
    r"|^[\w:<>,*& ]+\s[\w:]+\([^;]*\)\s*(const\s*)?\{\s*$")


class Block:
    def __init__(self, page: pathlib.Path, line: int, lang: str, code: str, note: str | None):
        self.page, self.line, self.lang, self.code = page, line, lang, code
        self.continues = bool(note) and note.lstrip().startswith("continues")
        context = note.strip() if note else ""
        self.context = context[len("continues"):].lstrip(" ;\n") if self.continues else context

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: pathlib.Path) -> list[Block]:
    found, lines = [], page.read_text().splitlines()
    i = 0
    while i < len(lines):
        fence = re.match(r"^```(cpp|python)\s*$", lines[i])
        if not fence:
            i += 1
            continue
        start = i
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        # The note ends on the last non-empty line above the fence.
        above = start - 1
        while above >= 0 and not lines[above].strip():
            above -= 1
        note = None
        if above >= 0 and lines[above].rstrip().endswith("-->"):
            first = above
            while first > 0 and "<!--" not in lines[first]:
                first -= 1
            match = NOTE.search("\n".join(lines[first:above + 1]))
            note = match.group(1) if match else None
        found.append(Block(page, start + 1, fence.group(1), "\n".join(lines[start + 1:end]), note))
        i = end + 1
    return found


def split_cpp(code: str) -> tuple[list[str], list[str], list[str]]:
    """(includes, namespace-scope lines, function-body lines) of a C++ block."""
    includes, outer, body = [], [], []
    if re.search(r"\bint main\(", code):
        for line in code.splitlines():
            (includes if line.startswith("#include") else outer).append(line)
        return includes, outer, body
    depth, target = 0, body
    for line in code.splitlines():
        if line.startswith("#include"):
            includes.append(line)
            continue
        if depth == 0:
            target = outer if FILE_SCOPE.match(line) else body
        target.append(line)
        depth += line.count("{") - line.count("}")
    return includes, outer, body


def write_cpp(out: pathlib.Path, without: list[str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for page in PAGES:
        name = page.stem if page.parent == ROOT / "docs" else page.stem.lower()
        target = out / f"{name}.cpp"
        # What a fragment's page has its reader include: modhooks, libtorch's C++ API with
        # TorchScript, the aoti and executorch components where they are built, and the standard
        # headers they print and collect with.
        units, includes = [], ["#include <modhooks/modhooks.h>", "#include <torch/script.h>",
                               "#include <torch/torch.h>", "#include <cstdio>",
                               "#include <iostream>", "#include <map>"]
        for component in ("aoti", "executorch", "dist"):
            if component not in without:
                includes.insert(1, f"#include <modhooks/{component}.h>")
        program: list[str] | None = None  # the body lines of the block being continued
        for block in (b for b in blocks(page) if b.lang == "cpp"):
            if any(word in block.code for word in without):
                units.append(f"// {block.where}: left out (names {', '.join(without)})")
                program = None
                continue
            block_includes, outer, body = split_cpp(block.code)
            includes += [i for i in block_includes if i not in includes]
            if block.continues and program is not None:
                program += [f"// {block.where}", block.context, *body]
                units[-1][1].extend(outer)
                continue
            program = [f"// {block.where}", block.context, *body]
            units.append((block.where, list(outer), program))
        text = [f"// Generated by scripts/doc-blocks.py from {page.relative_to(ROOT)}: every C++",
                "// block as written, compiled by tests/CMakeLists.txt."]
        if units:  # a page without blocks costs no parse of libtorch's headers
            text += [*includes, ""]
        for n, unit in enumerate(units):
            if isinstance(unit, str):
                text.append(unit)
                continue
            where, outer, body = unit
            if any(re.search(r"\bint main\(", line) for line in outer):
                # A whole program: at global scope, where `main` is the program's (one a page).
                text += [f"// {where}", *outer, ""]
                continue
            text += [f"namespace doc_block_{n} {{  // {where}", *outer]
            if any(line.strip() for line in body[2:]):
                text += ["[[maybe_unused]] void run() {", *body, "}"]
            text += [f"}}  // namespace doc_block_{n}", ""]
        new = "\n".join(text) + "\n"
        if not target.exists() or target.read_text() != new:
            target.write_text(new)


def run_python() -> int:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python"))
    failed = 0
    for page in PAGES:
        program: list[str] = []
        chain: list[Block] = []
        page_blocks = [b for b in blocks(page) if b.lang == "python"]
        for k, block in enumerate(page_blocks):
            if not block.continues:
                program, chain = [], []
            program += [block.context, block.code]
            chain.append(block)
            if k + 1 < len(page_blocks) and page_blocks[k + 1].continues:
                continue
            with tempfile.TemporaryDirectory() as folder:
                done = subprocess.run([sys.executable, "-c", "\n".join(program)], cwd=folder,
                                      env=env, capture_output=True, text=True)
            where = ", ".join(b.where for b in chain)
            if done.returncode:
                failed += 1
                print(f"doc-blocks: {where} failed:\n{done.stderr[-3000:]}", file=sys.stderr)
            else:
                print(f"doc-blocks: {where} ran")
    return 1 if failed else 0


def main() -> int:
    if len(sys.argv) >= 3 and sys.argv[1] == "cpp":
        without = sys.argv[sys.argv.index("--without") + 1:] if "--without" in sys.argv else []
        write_cpp(pathlib.Path(sys.argv[2]), without)
        return 0
    if len(sys.argv) == 2 and sys.argv[1] == "python":
        return run_python()
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
