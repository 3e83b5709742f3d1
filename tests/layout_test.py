#!/usr/bin/env python3
"""The source tree's layout (docs/ARCHITECTURE.md, "Parts and rooms").

Three rules, read from the `#include "..."` lines of src/:
  - a part (src/<part>) includes only the parts PART_DEPS lets it, the
    parts below it;
  - the rooms of a part (its sub-folders, and the files at its top as one
    more room) include each other one way only: no cycle, a test's
    includes counted as its room's;
  - no source folder holds more than MAX_FILES files (NOT_YET_SPLIT names
    the folders that still do, each with a ceiling it may not pass).

  python3 tests/layout_test.py                  # the rules on this tree, and on made-up ones
  python3 tests/layout_test.py --check SRC_DIR  # the rules on SRC_DIR, one line per problem
"""

import os
import re
import sys
import tempfile
import unittest

# Which parts each part may include (besides itself). A part not listed here
# is an error: a new part says where it sits.
PART_DEPS = {
    "core": set(),
    "slice": {"core"},
    "shim": {"core", "slice"},
    "sim": {"core", "slice"},
    "daemon": {"core", "slice"},
    "client": {"core"},
    "cli": {"core", "client", "slurm"},
    "slurm": {"core", "client"},
    "kubernetes": {"core", "client"},
    "replay": {"core"},
}

MAX_FILES = 25

# Folders over MAX_FILES that are yet to be given rooms, with the most files
# each may hold meanwhile. An entry whose folder has come down to MAX_FILES
# is an error too: remove it, so that the list only shrinks.
NOT_YET_SPLIT = {
}

SOURCE_SUFFIXES = (".h", ".cc", ".c", ".def", ".inc")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
TOP = "(top)"  # The room of the files directly in a part's folder.


def source_files(src):
    """Paths relative to src of the sources under it, sorted."""
    out = []
    for root, dirs, files in os.walk(src):
        dirs.sort()
        for name in sorted(files):
            if name.endswith(SOURCE_SUFFIXES):
                out.append(os.path.relpath(os.path.join(root, name), src))
    return out


def includes(src, rel):
    """(line number, included path) of each of rel's includes that names a
    file under src (system and generated headers are not ours to check)."""
    out = []
    with open(os.path.join(src, rel), encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, 1):
            m = INCLUDE.match(line)
            if m and os.path.isfile(os.path.join(src, m.group(1))):
                out.append((number, m.group(1)))
    return out


def part_and_room(rel):
    parts = rel.split(os.sep)
    return parts[0], (parts[1] if len(parts) > 2 else TOP)


def check_parts(src, files, part_deps):
    errors = []
    for rel in files:
        part, _ = part_and_room(rel)
        if part not in part_deps:
            errors.append(f"src/{rel}: part '{part}' is not in PART_DEPS "
                          f"(tests/layout_test.py): say which parts it may include")
            continue
        for number, inc in includes(src, rel):
            other = inc.split("/")[0]
            if other != part and other not in part_deps[part]:
                allowed = ", ".join(sorted(part_deps[part])) or "nothing"
                errors.append(f"src/{rel}:{number}: includes {inc}: part '{part}' may include "
                              f"only {allowed}")
    return errors


def find_cycle(edges):
    """A cycle in {room: {room: evidence}} as a list of rooms, or None."""
    state = {}  # room -> 1 while on the stack, 2 when done.
    stack = []

    def visit(room):
        state[room] = 1
        stack.append(room)
        for nxt in sorted(edges.get(room, {})):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[room] = 2
        return None

    for room in sorted(edges):
        if room not in state:
            found = visit(room)
            if found:
                return found
    return None


def room_in(folder, rel):
    """The room of `folder` that holds `rel` (a path under it): its first
    sub-folder, or TOP for a file directly in it."""
    rest = rel[len(folder) + 1:].split(os.sep)
    return rest[0] if len(rest) > 1 else TOP


def check_rooms(src, files):
    """Rooms at every depth: a part's sub-folders, and a room's own
    sub-folders (src/kubernetes/device_plugin/base), each with its top."""
    errors = []
    by_folder = {}
    for rel in files:
        for number, inc in includes(src, rel):
            inc = inc.replace("/", os.sep)
            a, b = rel.split(os.sep)[:-1], inc.split(os.sep)[:-1]
            # Every folder holding both files, from the part down, below
            # which they part ways (or one of them sits in its top).
            depth = 1
            while depth <= min(len(a), len(b)) and a[:depth] == b[:depth]:
                folder = os.sep.join(a[:depth])
                room, inc_room = room_in(folder, rel), room_in(folder, inc)
                if room != inc_room:
                    edges = by_folder.setdefault(folder, {})
                    edges.setdefault(room, {}).setdefault(
                        inc_room, f"src/{rel}:{number} includes {inc}")
                    break
                depth += 1
    for folder, edges in sorted(by_folder.items()):
        # Each cycle is reported, then broken at its first edge to find the next.
        while True:
            cycle = find_cycle(edges)
            if not cycle:
                break
            steps = [edges[x][y] for x, y in zip(cycle, cycle[1:])]
            errors.append(f"src/{folder}: its rooms include each other in a cycle "
                          f"{' -> '.join(cycle)}: " + "; ".join(steps))
            del edges[cycle[0]][cycle[1]]
    return errors


def check_sizes(src, not_yet_split):
    errors = []
    seen = set()
    for root, dirs, files in os.walk(src):
        dirs.sort()
        rel = os.path.relpath(root, src)
        folder = "src" if rel == "." else os.path.join("src", rel)
        count = sum(1 for f in files if f != "CMakeLists.txt")
        ceiling = not_yet_split.get(folder)
        if ceiling is not None:
            seen.add(folder)
            if count > ceiling:
                errors.append(f"{folder}: {count} files, over its ceiling of {ceiling} until it is "
                              f"given rooms (NOT_YET_SPLIT in tests/layout_test.py)")
            elif count <= MAX_FILES:
                errors.append(f"{folder}: {count} files: take it out of NOT_YET_SPLIT "
                              f"(tests/layout_test.py)")
        elif count > MAX_FILES:
            errors.append(f"{folder}: {count} files, over {MAX_FILES}: give it rooms")
    for folder in sorted(set(not_yet_split) - seen):
        errors.append(f"{folder}: in NOT_YET_SPLIT but not in the tree: take it out")
    return errors


def check(src, part_deps=None, not_yet_split=None):
    part_deps = PART_DEPS if part_deps is None else part_deps
    not_yet_split = NOT_YET_SPLIT if not_yet_split is None else not_yet_split
    files = source_files(src)
    return (check_parts(src, files, part_deps) + check_rooms(src, files) +
            check_sizes(src, not_yet_split))


SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")


# The rules the made-up trees below are checked against.
TEST_PART_DEPS = {
    "core": set(),
    "formats": {"core"},
    "shim": {"core", "formats"},
    "slurm": {"core"},
    "daemon": {"core", "formats"},
}
TEST_NOT_YET_SPLIT = {"src/core": MAX_FILES + 3}


class MadeUpTree:
    """A src/ folder in a temp dir from {path: text}, checked against the
    rules above."""

    def __init__(self, files):
        self.tmp = tempfile.TemporaryDirectory()
        self.src = os.path.join(self.tmp.name, "src")
        for rel, text in files.items():
            path = os.path.join(self.src, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(text)
        # src/core is not yet split: present and within its ceiling, so silent.
        os.makedirs(os.path.join(self.src, "core"), exist_ok=True)
        for i in range(MAX_FILES + 1):
            open(os.path.join(self.src, "core", f"f{i}.h"), "w").close()

    def check(self, part_deps=None):
        return check(self.src, part_deps or TEST_PART_DEPS, TEST_NOT_YET_SPLIT)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.tmp.cleanup()


def inc(path):
    return f'#include "{path}"\n'


class LayoutTest(unittest.TestCase):
    def test_the_source_tree_keeps_its_layout(self):
        problems = check(SRC)
        self.assertFalse(problems, "\n" + "\n".join(problems))

    def test_a_tree_that_keeps_the_rules_passes(self):
        with MadeUpTree({"core/a.h": "", "formats/r.h": inc("core/a.h"),
                         "daemon/store/l.h": inc("formats/r.h"),
                         "daemon/jobs/s.h": inc("daemon/store/l.h") + '#include <vector>\n',
                         "daemon/main.cc": inc("daemon/jobs/s.h")}) as tree:
            self.assertEqual(tree.check(), [])

    def test_the_daemon_including_the_shims_folder_is_named(self):
        with MadeUpTree({"shim/region.h": "", "daemon/compute/arbiter.cc":
                         "// x\n" + inc("shim/region.h")}) as tree:
            errors = tree.check()
        self.assertEqual(len(errors), 1, errors)
        self.assertIn("src/daemon/compute/arbiter.cc:2: includes shim/region.h", errors[0])

    def test_the_daemon_including_an_integration_is_named(self):
        with MadeUpTree({"slurm/conf.h": "", "daemon/node/doctor.cc": inc("slurm/conf.h")}) as tree:
            errors = tree.check()
        self.assertEqual(len(errors), 1, errors)
        self.assertIn("part 'daemon' may include only core, formats", errors[0])

    def test_a_part_nobody_placed_is_named(self):
        with MadeUpTree({"newpart/x.h": ""}) as tree:
            errors = tree.check()
        self.assertEqual(len(errors), 1, errors)
        self.assertIn("part 'newpart' is not in PART_DEPS", errors[0])

    def test_a_cycle_between_the_rooms_of_a_room_is_named(self):
        with MadeUpTree({"kubernetes/plugin/base/log.h": inc("kubernetes/plugin/daemon/client.h"),
                         "kubernetes/plugin/daemon/client.h": inc("kubernetes/plugin/base/log.h"),
                         "kubernetes/plugin/main.cc": inc("kubernetes/plugin/daemon/client.h")}) as tree:
            errors = tree.check(part_deps={**TEST_PART_DEPS, "kubernetes": {"core"}})
        self.assertEqual(errors, ["src/kubernetes/plugin: its rooms include each other in a cycle "
                                  "daemon -> base -> daemon: src/kubernetes/plugin/daemon/client.h:1 "
                                  "includes kubernetes/plugin/base/log.h; "
                                  "src/kubernetes/plugin/base/log.h:1 includes "
                                  "kubernetes/plugin/daemon/client.h"])

    def test_an_include_cycle_between_rooms_is_named_with_each_step(self):
        with MadeUpTree({"daemon/api/api.h": inc("daemon/jobs/service.h"),
                         "daemon/jobs/service.h": inc("daemon/store/ledger.h"),
                         "daemon/store/ledger.h": "\n" + inc("daemon/api/api.h")}) as tree:
            errors = tree.check()
        self.assertEqual(len(errors), 1, errors)
        self.assertIn("cycle api -> jobs -> store -> api", errors[0])
        self.assertIn("src/daemon/store/ledger.h:2 includes daemon/api/api.h", errors[0])

    def test_a_test_that_includes_a_room_above_its_own_closes_a_cycle_too(self):
        with MadeUpTree({"daemon/jobs/service.h": inc("daemon/launch/launcher.h"),
                         "daemon/launch/launcher.h": "",
                         "daemon/launch/launcher_test.cc": inc("daemon/jobs/service.h")}) as tree:
            errors = tree.check()
        self.assertEqual(len(errors), 1, errors)
        self.assertIn("cycle", errors[0])

    def test_a_room_that_includes_the_top_of_its_part_closes_a_cycle(self):
        with MadeUpTree({"daemon/main.cc": inc("daemon/api/api.h"),
                         "daemon/helpers.h": "",
                         "daemon/api/api.h": inc("daemon/helpers.h")}) as tree:
            errors = tree.check()
        self.assertEqual(len(errors), 1, errors)
        self.assertIn("(top) -> api -> (top)", errors[0])

    def test_a_folder_over_the_limit_is_named(self):
        files = {f"daemon/jobs/f{i}.h": "" for i in range(MAX_FILES + 1)}
        files["daemon/jobs/CMakeLists.txt"] = ""  # Not counted.
        with MadeUpTree(files) as tree:
            errors = tree.check()
        self.assertEqual(errors, [f"src/daemon/jobs: {MAX_FILES + 1} files, over {MAX_FILES}: "
                                  f"give it rooms"])

    def test_a_folder_not_yet_split_may_not_grow_and_leaves_the_list_once_small(self):
        with MadeUpTree({}) as tree:
            core = os.path.join(tree.src, "core")
            for i in range(2):  # MAX_FILES + 3 files: at its ceiling.
                open(os.path.join(core, f"g{i}.h"), "w").close()
            self.assertEqual(tree.check(), [])
            open(os.path.join(core, "g2.h"), "w").close()
            self.assertEqual(tree.check(), [f"src/core: {MAX_FILES + 4} files, over its ceiling of "
                                            f"{MAX_FILES + 3} until it is given rooms (NOT_YET_SPLIT "
                                            f"in tests/layout_test.py)"])
            for name in os.listdir(core)[:4]:
                os.remove(os.path.join(core, name))
            self.assertEqual(tree.check(), [f"src/core: {MAX_FILES} files: take it out of "
                                            f"NOT_YET_SPLIT (tests/layout_test.py)"])

if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--check":
        problems = check(sys.argv[2])
        print("\n".join(problems) or "the layout keeps its rules")
        sys.exit(1 if problems else 0)
    unittest.main()
