"""The layer table of docs/architecture.md, held at link level.

Reads each layer's objects with nm: every symbol a layer's objects use must be
defined in the layer itself or in one the table allows (the "may include" and
"calls through the public headers only" columns), and the table must list the
same layers as each folder's stepscope_add_layer(DEPENDS ... CALLS ...).

  link_check.py <nm> <layers.txt> <docs/architecture.md>

layers.txt: a line per layer, "name<TAB>depends<TAB>calls<TAB>file;file...".
"""
import re
import subprocess
import sys


def symbols(nm, path, flags):
    out = subprocess.run([nm, *flags, path], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 2 and not line.endswith(':'):
            yield parts[-2], parts[-1]


def doc_table(text, names):
    """{layer: set of layers} from the table's rows "| `layer` | includes | calls |"."""
    table = {}
    for row in re.findall(r'^\| `(\w+)` +\|(.*)$', text, re.M):
        layer, rest = row
        cells = [re.sub(r'\([^()]*(\([^()]*\)[^()]*)*\)', '', c) for c in rest.split('|')[:2]]
        table[layer] = {w for c in cells for w in re.findall(r'\w+', c) if w in names}
    return table


def main(nm, layers_file, doc):
    layers = {}
    for line in open(layers_file).read().splitlines():
        if not line.strip():
            continue
        name, depends, calls, files = line.split('\t')
        layers[name] = (set(depends.split()) | set(calls.split()), [f for f in files.split(';') if f])
    failures = []

    table = doc_table(open(doc).read(), set(layers))
    for name, (allowed, _) in sorted(layers.items()):
        if name not in table:
            failures.append(f'docs/architecture.md: no row for layer `{name}`')
        elif table[name] != allowed:
            failures.append(f'layer {name}: src/{name}/CMakeLists.txt allows {sorted(allowed)}, '
                            f'docs/architecture.md says {sorted(table[name])}')

    defined = {}  # symbol -> layer (strong definitions: weak ones are header-inline code)
    for name, (_, files) in layers.items():
        for f in files:
            for kind, sym in symbols(nm, f, ['-g', '--defined-only']):
                if kind not in 'VWvwu':
                    defined.setdefault(sym, name)
    for name, (allowed, files) in sorted(layers.items()):
        bad = {}
        for f in files:
            for _, sym in symbols(nm, f, ['-u']):
                owner = defined.get(sym)
                if owner is not None and owner != name and owner not in allowed:
                    bad.setdefault(owner, set()).add(sym)
        for owner, syms in sorted(bad.items()):
            shown = subprocess.run(['c++filt'], input='\n'.join(sorted(syms)), capture_output=True,
                                   text=True).stdout.split('\n')
            failures.append(f'layer {name} uses {len(syms)} symbol(s) of layer {owner}, which the table '
                            f'does not allow: ' + '; '.join(s for s in shown[:5] if s))
    for f in failures:
        print(f)
    count = sum(len(files) for _, files in layers.values())
    print(f'{len(layers)} layers, {count} objects, {len(defined)} symbols: '
          + ('the table holds' if not failures else f'{len(failures)} problem(s)'))
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main(*sys.argv[1:]))
