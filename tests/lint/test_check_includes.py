# SPDX-License-Identifier: Apache-2.0
"""The include directions of lib/README.md hold in the tree, and the check
that keeps them (tests/lint/check-includes.py, run by `make lint`) fails on
each kind of forbidden include put into a copy of the tree."""
import os
import shutil
import subprocess
import sys

import pytest

SRCDIR = os.environ.get("MOONCAKE_SEGMENT_SRCDIR", os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
CHECK = os.path.join(SRCDIR, "tests", "lint", "check-includes.py")


def run_check(root):
    return subprocess.run(
        [sys.executable, CHECK, "--root", str(root)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


@pytest.fixture
def tree(tmp_path):
    for folder in ("lib", "tools", "bindings", "keeper"):
        shutil.copytree(os.path.join(SRCDIR, folder), tmp_path / folder)
    return tmp_path


def add_include(tree, path, header):
    with open(tree / path, "a", encoding="utf-8") as f:
        f.write('\n#include "%s"\n' % header)


def test_the_tree_follows_the_directions():
    result = run_check(SRCDIR)
    assert result.returncode == 0, result.stdout


def test_the_copy_passes_before_it_is_broken(tree):
    result = run_check(tree)
    assert result.returncode == 0, result.stdout


@pytest.mark.parametrize(
    "path, header, rule",
    [
        ("lib/host/window.c", "backends/backend.h", "lib/host may include lib/base"),
        ("lib/route/peer-fd.c", "segment/segment.h", "lib/route may include lib/base, lib/host"),
        ("lib/backends/host-memfd.c", "segment/blob.h", "lib/backends may include lib/accel, lib/base"),
        ("lib/base/error.c", "host/procfs.h", "lib/base may include no other folder"),
        ("lib/accel/accel.c", "route/route.h", "lib/accel may include lib/base, lib/host"),
        ("tools/main.c", "host/procfs.h", "tools/ may include only its own headers"),
        ("keeper/store.c", "segment/segment.h", "keeper/ may include only its own headers"),
        ("keeper/commit.c", "accel/accel.h", "keeper/ may include only its own headers"),
        ("lib/private.h", "host/cgroup.h", "must include no header of the library"),
        ("lib/segment/segment.c", "nowhere/missing.h", "which is not in the tree"),
    ],
)
def test_a_forbidden_include_fails_naming_file_and_rule(tree, path, header, rule):
    add_include(tree, path, header)
    result = run_check(tree)
    assert result.returncode == 1
    lines = [line for line in result.stdout.splitlines() if line.startswith(path + ":")]
    assert len(lines) == 1, result.stdout
    assert '"%s"' % header in lines[0] and rule in lines[0]


def test_a_folder_given_a_new_direction_in_the_readme_may_use_it(tree):
    add_include(tree, "lib/host/window.c", "route/route.h")
    assert run_check(tree).returncode == 1
    readme = tree / "lib" / "README.md"
    text = readme.read_text(encoding="utf-8").replace("    host:      base\n", "    host:      route base\n")
    readme.write_text(text, encoding="utf-8")
    result = run_check(tree)
    assert result.returncode == 0, result.stdout
