#!/usr/bin/env python3
"""The import graph of the library's top-level modules (src/*.rs and src/*/), from the paths
their code names (`crate::x`, `use crate::{x, ...}`, `super::x` in a top-level file). Test code
is left out (files named tests.rs, and items under `#[cfg(test)]`): tests may use any layer.
Names re-exported at the crate root count as the module that defines them. The crate root
(lib.rs) and `internals` only re-export, and nothing imports them.

Usage: scripts/module_graph.py [--dot] [SRC]   (default: src/). Prints each edge with the
files that make it, then the modules in layers (each imports only layers below it); exits 1
when the modules import each other in a circle, naming it.
"""
import re
import sys
from pathlib import Path


def strip_comments_and_strings(src):
    src = re.sub(r'//[^\n]*', '', src)
    src = re.sub(r'/\*.*?\*/', '', src, flags=re.S)
    return re.sub(r'"(\\.|[^"\\])*"', '""', src)


def strip_test_items(src):
    """`src` without the items that follow `#[cfg(test)]` (a block or a line ending in `;`)."""
    out, i = [], 0
    for m in re.finditer(r'#\[cfg\(test\)\]', src):
        if m.start() < i:
            continue
        out.append(src[i:m.start()])
        j = m.end()
        semi, brace = src.find(';', j), src.find('{', j)
        if brace < 0 or (0 <= semi < brace):
            i = semi + 1
            continue
        depth, k = 0, brace
        while k < len(src):
            depth += {'{': 1, '}': -1}.get(src[k], 0)
            k += 1
            if depth == 0:
                break
        i = k
    out.append(src[i:])
    return ''.join(out)


def root_names(lib):
    """Names the crate root re-exports, by the module that defines them."""
    names = {}
    for m in re.finditer(r'pub use (\w+)::(\{[^}]*\}|\w+);', lib):
        for n in m.group(2).strip('{}').split(','):
            n = n.strip()
            if n:
                names[n] = m.group(1)
    return names


def graph(src_dir):
    src_dir = Path(src_dir)
    files = {}
    for p in sorted(src_dir.rglob('*.rs')):
        rel = p.relative_to(src_dir)
        if rel.parts[0] == 'bin' or rel.parts == ('lib.rs',) or p.name == 'tests.rs':
            continue
        files.setdefault(rel.parts[0].removesuffix('.rs'), []).append(p)
    lib = strip_comments_and_strings((src_dir / 'lib.rs').read_text())
    names = root_names(lib)
    edges = {m: {} for m in files}

    def add(m, name, p):
        target = name if name in files else names.get(name)
        if target and target != m:
            edges[m].setdefault(target, set()).add(str(p))

    for m, paths in files.items():
        for p in paths:
            s = strip_test_items(strip_comments_and_strings(p.read_text()))
            for g in re.finditer(r'crate::\{([^;]*?)\}\s*;', s, flags=re.S):
                for item in g.group(1).split(','):
                    add(m, item.strip().split('::')[0].strip('{} \n'), p)
            for r in re.finditer(r'crate::(\w+)', s):
                add(m, r.group(1), p)
            if p.parent == src_dir:
                for r in re.finditer(r'\bsuper::(\w+)', s):
                    add(m, r.group(1), p)
    return edges


def layers(edges):
    """Modules in layers, lowest first; None and a circle when there is one."""
    left, placed, out = set(edges), set(), []
    while left:
        layer = sorted(m for m in left if set(edges[m]) <= placed)
        if not layer:
            return None, circle(edges, left)
        out.append(layer)
        placed |= set(layer)
        left -= set(layer)
    return out, None


def circle(edges, left):
    start = min(left)
    path, seen = [start], {start: 0}
    while True:
        nxt = min(t for t in edges[path[-1]] if t in left)
        if nxt in seen:
            return path[seen[nxt]:] + [nxt]
        seen[nxt] = len(path)
        path.append(nxt)


def main():
    args = [a for a in sys.argv[1:] if not a.startswith('--')]
    edges = graph(args[0] if args else 'src')
    if '--dot' in sys.argv:
        print('digraph brevis {')
        for m in sorted(edges):
            for t in sorted(edges[m]):
                print(f'  "{m}" -> "{t}";')
        print('}')
        return 0
    for m in sorted(edges):
        for t in sorted(edges[m]):
            print(f'{m} -> {t}   ({", ".join(sorted(edges[m][t]))})')
    order, cyc = layers(edges)
    if cyc:
        print('\nmodule circle: ' + ' -> '.join(cyc))
        return 1
    print('\nlayers, lowest first (each module imports only modules of lower layers):')
    for i, layer in enumerate(order):
        print(f'  {i}: {", ".join(layer)}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
