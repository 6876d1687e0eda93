#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Fails when a room of the library includes a header its row of the layer table does not allow.
The table, under "## Layers" in docs/architecture.md, is the one place that says what each room
may include; this reads it, then every `#include "modhooks/..."` under include/modhooks/ and
src/. Run from anywhere: python3 scripts/check-layers.py"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
TABLE = ROOT / "docs" / "architecture.md"
INCLUDE = ROOT / "include" / "modhooks"
SRC = ROOT / "src"


def read_table():
    """{room: (places, allowed)}: places and allowed are paths relative to include/modhooks/, a
    folder ending in '/' or one header."""
    text = TABLE.read_text()
    section = text.split("\n## Layers\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ")][2:]
    rooms = {}
    for row in rows:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        room, where, may = cells[0], cells[1], cells[2]
        places = re.findall(r"`([^`]+)`", where)
        rooms[room] = (places, [item.strip() for item in may.split(",") if item.strip()])
    return rooms


def room_of(relative, rooms):
    """The room a file belongs to; `relative` is its path under include/modhooks/ or src/."""
    best, length = None, -1
    for room, (places, _) in rooms.items():
        for place in places:
            if (relative == place or relative.startswith(place)) and len(place) > length:
                best, length = room, len(place)
    return best


def allowed(target, room, rooms):
    """Whether a file of `room` may include modhooks/`target`."""
    if target == "version.h":
        return True
    places, may = rooms[room]
    for item in may:
        if item.endswith(".h"):
            if target == item:
                return True
        elif any(target == p or target.startswith(p) for p in rooms[item][0]):
            return True
    return any(target == p or target.startswith(p) for p in places)


def main():
    rooms = read_table()
    problems = []
    for base in (INCLUDE, SRC):
        for path in sorted(base.rglob("*")):
            if path.suffix not in (".h", ".cpp"):
                continue
            relative = path.relative_to(base).as_posix()
            room = room_of(relative, rooms)
            if room is None:
                if base == SRC and relative == "pch.h":
                    continue
                problems.append(f"{path.relative_to(ROOT)}: in no room of the layer table "
                                f"in {TABLE.relative_to(ROOT)}")
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                found = re.match(r'\s*#\s*include\s+"modhooks/([^"]+)"', line)
                if found and not allowed(found.group(1), room, rooms):
                    problems.append(f"{path.relative_to(ROOT)}:{number}: room {room} may not "
                                    f"include modhooks/{found.group(1)}")
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        print(f"{len(problems)} include(s) break the layer table in {TABLE.relative_to(ROOT)}",
              file=sys.stderr)
        return 1
    print(f"layers: every include of {len(rooms)} rooms is allowed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
