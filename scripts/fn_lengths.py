#!/usr/bin/env python3
"""Lists Rust functions longer than a limit (default 120 lines), from `fn` to its closing brace.

Usage: scripts/fn_lengths.py [--max N] [DIR ...]   (default: src/). Exits 1 when one is longer.
Braces inside strings, chars and comments are skipped; raw strings r#"..."# are handled.
"""
import re
import sys
from pathlib import Path

FN = re.compile(r'^\s*(pub(\([^)]*\))?\s+)?(const\s+)?(async\s+)?(unsafe\s+)?(extern\s+"[^"]*"\s+)?fn\s+(\w+)')


def strip(src):
    """The source with string, char and comment contents blanked (newlines kept)."""
    out, i, n = [], 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith('//', i):
            j = src.find('\n', i)
            j = n if j < 0 else j
            out.append(' ' * (j - i))
            i = j
        elif src.startswith('/*', i):
            j = src.find('*/', i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r'[^\n]', ' ', src[i:j]))
            i = j
        elif m := re.match(r'b?r(#*)"', src[i:i + 10]):
            end = '"' + m.group(1)
            j = src.find(end, i + len(m.group(0)))
            j = n if j < 0 else j + len(end)
            out.append(re.sub(r'[^\n]', ' ', src[i:j]))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and src[j] != '"':
                j += 2 if src[j] == '\\' else 1
            out.append(re.sub(r'[^\n]', ' ', src[i:j + 1]))
            i = j + 1
        elif c == "'" and (m := re.match(r"'(\\.[^']*|[^\\'])'", src[i:i + 12])):
            out.append(' ' * len(m.group(0)))
            i += len(m.group(0))
        else:
            out.append(c)
            i += 1
    return ''.join(out)


def functions(path):
    lines = strip(path.read_text()).split('\n')
    for k, line in enumerate(lines):
        m = FN.match(line)
        if not m:
            continue
        depth, started = 0, False
        for e in range(k, len(lines)):
            if not started and ';' in lines[e] and '{' not in lines[e]:
                break  # a declaration without a body
            for ch in lines[e]:
                if ch == '{':
                    depth += 1
                    started = True
                elif ch == '}':
                    depth -= 1
            if started and depth == 0:
                yield m.group(7), k + 1, e - k + 1
                break


def main():
    args = sys.argv[1:]
    limit = 120
    if args[:1] == ['--max']:
        limit, args = int(args[1]), args[2:]
    long = []
    for d in args or ['src']:
        for p in sorted(Path(d).rglob('*.rs')):
            for name, line, n in functions(p):
                if n > limit:
                    long.append((n, f'{p}:{line}', name))
    for n, where, name in sorted(long, reverse=True):
        print(f'{n:5} {where} {name}')
    print(f'{len(long)} functions over {limit} lines')
    sys.exit(1 if long else 0)


if __name__ == '__main__':
    main()
