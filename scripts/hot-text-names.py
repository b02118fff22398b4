#!/usr/bin/env python3
"""Rewrites crates/ebbtide-malloc/hot-text.txt's names into the form that survives a toolchain
change: what changes with the toolchain or the build (not with the function) is cut or made a
wildcard, and a line that an earlier line's pattern covers (a duplicate the cut made, or a
longer name the earlier prefix matches) is dropped: the linker gives each function to the first
pattern that matches it, so the later line would match nothing and fail the link.

* legacy mangling (`_ZN...`): the hash suffix `17h<16 hex>E` is cut;
* v0 mangling (`_R...`, std's names): each crate disambiguator `Cs<base62>_` becomes `Cs*_`;
* both: an LLVM suffix `.llvm.<digits>` is cut.

Idempotent; comment lines and the order are kept. Run it after editing the list by hand or
merging an edit of it: `python3 scripts/hot-text-names.py [LIST]`.
"""
import fnmatch
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIST = os.path.join(ROOT, 'crates/ebbtide-malloc/hot-text.txt')


def robust(name):
    """The build-independent form of one mangled name (see the module docs)."""
    name = re.sub(r'\.llvm\.\d+$', '', name)
    if name.startswith('_ZN'):
        name = re.sub(r'17h[0-9a-f]{16}E$', '', name)
    elif name.startswith('_R'):
        name = re.sub(r'Cs[0-9A-Za-z]+_', 'Cs*_', name)
    return name


def convert(text):
    out, seen = [], []
    for line in text.split('\n'):
        name = line.strip()
        if not name or name.startswith('#'):
            out.append(line)
            continue
        name = robust(name)
        # Each line is the linker pattern NAME* (build.rs).
        covering = next((s for s in seen if fnmatch.fnmatchcase(name, s + '*')), None)
        if covering is not None:
            print(f'dropped {name}: covered by {covering}', file=sys.stderr)
            continue
        seen.append(name)
        out.append(name)
    return '\n'.join(out)


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else LIST
    with open(path) as f:
        text = f.read()
    new = convert(text)
    if new != text:
        with open(path, 'w') as f:
            f.write(new)
    print(f'{path}: {sum(1 for l in new.split(chr(10)) if l.strip() and not l.startswith("#"))} names',
          file=sys.stderr)


if __name__ == '__main__':
    main()
