#!/usr/bin/env python3
"""Figures of the source tree's layout: the largest files and functions, the
sources that more than one CMake target compiles, and the runtime entry points
of generated code that runtime/include/mfrt/CodegenABI.def does not declare.

  scripts/code-stats.py [DIR]    (DIR: a git checkout, default .)

A function is counted from the line that starts its signature at column 0 to
the next line that starts with '}' (LLVM style puts both there)."""
import os
import re
import subprocess
import sys


def tracked(root):
    return subprocess.check_output(['git', '-C', root, 'ls-files'],
                                   text=True).split()


def functions(path):
    lines = open(path, errors='replace').read().split('\n')
    out, i = [], 0
    while i < len(lines):
        line = lines[i]
        if not line.endswith('{') or line.startswith('#'):
            i += 1
            continue
        s = i
        while s > 0 and lines[s - 1].strip() and not lines[s - 1].lstrip(
        ).startswith(('//', '#')) and not lines[s - 1].rstrip().endswith(
                (';', '{', '}', ':')):
            s -= 1
        head, sig = lines[s], ' '.join(lines[s:i + 1])
        if (not head or head[0].isspace() or '(' not in sig or re.match(
                r'(namespace|extern "C"|struct|class|enum|union)\b', head)):
            i += 1
            continue
        j = i + 1
        while j < len(lines) and not lines[j].startswith('}'):
            j += 1
        out.append((j - s + 1, s + 1, re.sub(r'\s+', ' ', sig)[:80]))
        i = j + 1
    return out


def cmake_sources(root, files):
    """Source path -> the CMake files whose targets name it."""
    named = {}
    pattern = re.compile(r'\b(add_library|add_mlir_library|add_executable|'
                         r'add_llvm_executable|meshfold_unittest)\(([^)]*)\)')
    for f in (f for f in files if f.endswith('CMakeLists.txt')):
        folder = os.path.dirname(f)
        for m in pattern.finditer(open(os.path.join(root, f)).read()):
            for tok in m.group(2).split()[1:]:
                if not re.search(r'\.(cpp|cu)$', tok):
                    continue
                tok = tok.replace('${PROJECT_SOURCE_DIR}/', '/')
                tok = tok.replace('${CMAKE_CURRENT_SOURCE_DIR}/', '')
                p = tok[1:] if tok.startswith('/') else os.path.normpath(
                    os.path.join(folder, tok))
                named.setdefault(p, []).append(f)
    return named


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else '.'
    files = tracked(root)
    src = [f for f in files if re.search(r'\.(cpp|h|cu)$', f)]
    sizes = sorted(((sum(1 for _ in open(os.path.join(root, f), errors='replace')), f)
                    for f in src), reverse=True)
    print('largest files:')
    for n, f in sizes[:3]:
        print('  %5d  %s' % (n, f))
    funcs = sorted(((n, f, line, sig) for f in src if f.endswith(('.cpp', '.cu'))
                    for n, line, sig in functions(os.path.join(root, f))),
                   reverse=True)
    print('largest functions:')
    for n, f, line, sig in funcs[:5]:
        print('  %5d  %s:%d  %s' % (n, f, line, sig))
    named = cmake_sources(root, files)
    multi = sorted(p for p, v in named.items() if len(v) > 1)
    foreign = sorted(p for p, v in named.items()
                     if any(not p.startswith(os.path.dirname(c) + '/') for c in v))
    print('sources in more than one target: %d %s' % (len(multi), multi))
    print('sources compiled from another folder: %d %s' % (len(foreign), foreign))
    # Entry points: what the runtime defines for generated code and what the
    # conversions name, against the one declaration.
    defined, called = set(), set()
    for f in src:
        text = open(os.path.join(root, f), errors='replace').read()
        if f.startswith('runtime/') and f.endswith('.cpp'):
            defined |= set(re.findall(r'^\w[\w\s\*]*?\b_mlir_ciface_(mfrt_\w+)\(',
                                      text, re.M))
            defined |= set(re.findall(r'^void \*(mfrt_weight)\(', text, re.M))
        if f.startswith('lib/Conversion/'):
            called |= set(re.findall(r'"(mfrt_\w+)"', text))
    abi = os.path.join(root, 'runtime/include/mfrt/CodegenABI.def')
    declared = set()
    if os.path.exists(abi):
        declared = set(re.findall(r'^MFRT_CODEGEN_\w+\((\w+),', open(abi).read(),
                                  re.M))
    # A literal that only starts a composed name (the ring step's, with its
    # element types appended) is checked when the conversion looks it up.
    called = {c for c in called
              if not any(d.startswith(c + '_') for d in declared)}
    undeclared = sorted((defined | called) - declared)
    print('entry points of generated code not in CodegenABI.def: %d of %d %s' %
          (len(undeclared), len(defined | called | declared), undeclared))


if __name__ == '__main__':
    main()
