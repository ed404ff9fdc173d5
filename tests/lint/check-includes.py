#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Check that every #include of the library, the CLI and the binding follows
the directions written in lib/README.md (the block between the
include-rules markers): a folder of lib/ includes its own headers and those
of the folders listed for it; tools/, bindings/ and keeper/ include only
their own headers and those listed for them (a name without ".h" allows a
whole folder of lib/).  config.h (the build's) is allowed everywhere.

Usage: check-includes.py [--root DIR]   (DIR: the source tree, default: this file's)
Exits 1 naming each include that breaks a rule, with the rule.
"""
import argparse
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
RULE = re.compile(r"^\s*([\w/.-]+):\s*(.*?)\s*$")


def read_rules(root):
    """{'host': {'base'}, ..., 'tools': {'mooncake/segment.h', ...}}"""
    text = open(os.path.join(root, "lib", "README.md"), encoding="utf-8").read()
    match = re.search(r"<!-- include-rules -->(.*?)<!-- /include-rules -->", text, re.S)
    if not match:
        sys.exit("check-includes: lib/README.md has no include-rules block")
    rules = {}
    for line in match.group(1).splitlines():
        line = line.split("#", 1)[0]
        found = RULE.match(line)
        if found:
            rules[found.group(1)] = set(found.group(2).split())
    return rules


def resolve(root, source, name):
    """The repository-relative path an include names (the file's own folder
    first, then lib/ as -I lib finds it), or None."""
    for base in (os.path.dirname(source), "lib"):
        path = os.path.normpath(os.path.join(base, name))
        if os.path.isfile(os.path.join(root, path)):
            return path
    return None


def sources(root, folder):
    for dirpath, _, files in os.walk(os.path.join(root, folder)):
        for name in sorted(files):
            if name.endswith((".c", ".h")):
                yield os.path.relpath(os.path.join(dirpath, name), root)


def layer_of(path):
    """('lib', 'host') for lib/host/x.c; ('lib', '') for lib/private.h; ('tools', '') ..."""
    parts = path.split(os.sep)
    if parts[0] == "lib":
        return ("lib", parts[1] if len(parts) > 2 and parts[1] != "mooncake" else "")
    if parts[0] == "bindings":
        return ("bindings", "")
    return (parts[0], "")


def check(root):
    rules = read_rules(root)
    interfaces = {"lib/mooncake/segment.h", "lib/private.h"}
    broken = []
    for top in ("lib", "tools", "bindings", "keeper"):
        for source in sources(root, top):
            kind, folder = layer_of(source)
            text = open(os.path.join(root, source), encoding="utf-8").read()
            for number, name in ((text.count("\n", 0, m.start()) + 1, m.group(1)) for m in INCLUDE.finditer(text)):
                if name == "config.h":
                    continue
                target = resolve(root, source, name)
                where = '%s:%d: includes "%s"' % (source, number, name)
                if target is None:
                    broken.append("%s, which is not in the tree" % where)
                    continue
                if kind == "lib" and not folder:
                    # The public and the private interface are leaves.
                    if target.startswith("lib" + os.sep):
                        broken.append("%s: %s must include no header of the library" % (where, source))
                    continue
                if kind == "lib":
                    if target in interfaces:
                        continue
                    target_folder = layer_of(target)[1]
                    allowed = rules.get(folder, set())
                    if target_folder != folder and target_folder not in allowed:
                        broken.append(
                            "%s: lib/%s may include %s (lib/README.md)"
                            % (where, folder, ", ".join("lib/%s" % f for f in sorted(allowed)) or "no other folder")
                        )
                    continue
                own = os.path.dirname(source)
                if os.path.dirname(target) == own:
                    continue
                allowed = rules.get(kind, set())
                in_lib = not os.path.relpath(target, "lib").startswith("..")
                if os.path.relpath(target, "lib") not in allowed and not (in_lib and layer_of(target)[1] in allowed):
                    broken.append(
                        "%s: %s/ may include only its own headers and %s (lib/README.md)"
                        % (where, kind, ", ".join(sorted(allowed)))
                    )
    return broken


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    here = os.path.dirname(os.path.abspath(__file__))
    parser.add_argument("--root", default=os.path.dirname(os.path.dirname(here)))
    args = parser.parse_args()
    broken = check(args.root)
    for line in broken:
        print(line)
    if broken:
        print("check-includes: %d include(s) break the directions of lib/README.md" % len(broken))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
