#!/usr/bin/env python3
"""The front doors name only what is there: every path of the tree that README.md or HACKING.md
names (in backticks or as a link target) exists, and HACKING.md's layout names every source file
of daemon/ and lib/ (the layers table is where a newcomer looks for a file's room).

    check-paths.py SOURCE_ROOT     exit 0 when all holds, 1 with one line per problem
    check-paths.py --self-test     the checks on made-up documents
"""
import re
import sys
import tempfile
from pathlib import Path

DOCS = ('README.md', 'HACKING.md')
LAYOUT_DOC = 'HACKING.md'
LAYOUT_DIRS = ('daemon', 'lib')
# What a build or a run makes, never in the tree.
BUILT = ('build/', 'build-asan/', 'build-fuzz/', 'build-pkg/', 'debs/')
# A bare file name (no slash) of these endings is a file of the tree, somewhere.
SOURCE_ENDINGS = ('.c', '.h', '.py', '.sh', '.scd', '.md')
# A word with a slash outside the tree's top folders is a path when it ends so.
PATH_ENDINGS = SOURCE_ENDINGS + ('.yaml', '.yml', '.conf', '.varlink', '.in')
TOKEN = re.compile(r'^[A-Za-z0-9_.][A-Za-z0-9_.\-/]*$')
CODE = re.compile(r'`([^`\n]+)`')
LINK = re.compile(r'\]\(([^)\s#]+)(?:#[^)]*)?\)')


def named_paths(text):
    """(line, path) for each path of the tree the text names: a word of a backticked span that
    has a slash or ends like a source file, or a relative link target."""
    for no, line in enumerate(text.split('\n'), 1):
        for span in CODE.findall(line):
            for word in span.split():
                word = word.rstrip('.,;:)')
                if not TOKEN.match(word) or word.startswith(('-', '..')) or not re.search('[A-Za-z]', word):
                    continue
                if '/' in word or word.endswith(SOURCE_ENDINGS):
                    yield no, word
        for target in LINK.findall(line):
            if '://' not in target:
                yield no, target


def problems(root):
    root = Path(root)
    names = {p.name for p in root.rglob('*') if '.git' not in p.parts}
    top = {p.name for p in root.iterdir()}
    found = []
    texts = {}
    for doc in DOCS:
        path = root / doc
        if not path.is_file():
            found.append(f'{doc}: missing')
            continue
        texts[doc] = path.read_text()
        for no, word in named_paths(texts[doc]):
            if word.startswith(BUILT):
                continue
            if '/' in word:
                # kubectl's `ds/bigtcpd` is no path: a word names the tree by its first folder
                # or by a file's ending
                if word.split('/')[0] not in top and not word.endswith(PATH_ENDINGS):
                    continue
                if not (root / word).exists():
                    found.append(f'{doc}:{no}: `{word}` is not in the tree')
            elif word not in names:
                found.append(f'{doc}:{no}: `{word}`: no file of that name in the tree')
    if LAYOUT_DOC in texts:
        spans = set(CODE.findall(texts[LAYOUT_DOC]))
        for d in LAYOUT_DIRS:
            for src in sorted((root / d).glob('*.c')) if (root / d).is_dir() else ():
                if src.name not in spans and f'{d}/{src.name}' not in spans:
                    found.append(f'{LAYOUT_DOC}: {d}/{src.name} is in no row of the layout (its layers table)')
    return found


def self_test():
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / 'daemon').mkdir()
        (root / 'daemon' / 'a.c').write_text('')
        (root / 'daemon' / 'b.c').write_text('')
        (root / 'scripts').mkdir()
        (root / 'scripts' / 'x.sh').write_text('')
        (root / 'README.md').write_text('Run `bash scripts/x.sh --quick`, see [it](HACKING.md#tests),\n'
                                        '`build/daemon/bigtcpd`, `/etc/bigtcpd/bigtcpd.yaml`, `a.c`, `ds/bigtcpd`, `2/4`.\n'
                                        'Gone: `scripts/y.sh`, [z](docs/z.md), `nothere.py`, `src/c.c`.\n')
        (root / 'HACKING.md').write_text('| layer | `a.c` |\n')
        got = problems(root)
        want = ['README.md:3: `scripts/y.sh` is not in the tree',
                'README.md:3: `nothere.py`: no file of that name in the tree',
                'README.md:3: `src/c.c` is not in the tree',
                'README.md:3: `docs/z.md` is not in the tree',
                'HACKING.md: daemon/b.c is in no row of the layout (its layers table)']
        if got != want:
            print('self-test: expected', want, 'got', got, sep='\n')
            return 1
        (root / 'scripts' / 'y.sh').write_text('')
        (root / 'docs').mkdir()
        (root / 'docs' / 'z.md').write_text('')
        (root / 'nothere.py').write_text('')
        (root / 'src').mkdir()
        (root / 'src' / 'c.c').write_text('')
        (root / 'HACKING.md').write_text('| layer | `a.c`, `daemon/b.c` |\n')
        got = problems(root)
        if got:
            print('self-test: expected nothing, got', got, sep='\n')
            return 1
    print('self-test: ok')
    return 0


def main(argv):
    if argv[1:] == ['--self-test']:
        return self_test()
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    found = problems(argv[1])
    for p in found:
        print(p)
    return 1 if found else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
