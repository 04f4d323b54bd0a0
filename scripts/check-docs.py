#!/usr/bin/env python3
"""Every relative link in the README and docs/ points at a file that exists and, where it names an
anchor, at a heading that file has, and every engine/ path they name exists (GitHub's slugs: lower case, punctuation dropped, spaces to
hyphens). The README was split into docs/ (issue 29); this keeps the pages and their links in step.
Usage: check-docs.py [--root DIR]; prints each broken link as FILE: LINK (why) and exits 1 if any."""
import argparse
import glob
import os
import re
import sys


# files docs/extending.md's worked examples add (they do not exist, by design)
NEW_IN_EXAMPLES = {'halves.c', 'probe.c', 'sweep_probe.c'}


def slug(heading):
    h = re.sub(r'[^\w\- ]', '', heading.strip().lower())
    return h.replace(' ', '-')


def anchors(path):
    with open(path, encoding='utf-8') as f:
        text = re.sub(r'```.*?```', '', f.read(), flags=re.S)
    return {slug(re.sub(r'^#+ ', '', l)) for l in text.split('\n') if re.match(r'^#+ ', l)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--root', default=os.path.join(os.path.dirname(__file__), '..'))
    root = ap.parse_args().root
    pages = ['README.md', 'bench/README.md', 'tools/README.md'] + sorted(
        os.path.relpath(p, root) for p in glob.glob(os.path.join(root, 'docs', '*.md')))
    bad = []
    for page in pages:
        with open(os.path.join(root, page), encoding='utf-8') as f:
            text = f.read()
        for m in re.finditer(r'\]\(([^)\s]+)\)', text):
            link = m.group(1)
            if re.match(r'[a-z]+:', link):
                continue
            path, _, anchor = link.partition('#')
            target = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
            if not os.path.exists(os.path.join(root, target)):
                bad.append(f'{page}: {link} (no file {target})')
            elif anchor and target.endswith('.md') and anchor not in anchors(os.path.join(root, target)):
                bad.append(f'{page}: {link} (no heading #{anchor} in {target})')
        # every engine/ path the page names (`engine/model/model.c`, `engine/plan/study/`, `engine/model/model*.c`)
        # exists: the engine's files move between folders and get new names, and a page would keep the old ones.
        # A file a worked example adds is named in NEW_IN_EXAMPLES, or by a placeholder (`query_NAME.c`,
        # `sweep_<procedure>.c`), in a folder that exists.
        for m in re.finditer(r'(?<![\w/.])engine/[\w./<>*-]*[\w/>*]', text):
            path = m.group(0)
            name, parent = os.path.basename(path.rstrip('/')), os.path.dirname(path.rstrip('/'))
            example = (name in NEW_IN_EXAMPLES or '<' in name or 'NAME' in name) and \
                os.path.isdir(os.path.join(root, parent)) and parent != 'engine'
            if not glob.glob(os.path.join(root, path)) and not example:
                bad.append(f'{page}: {path} (no such file or folder)')
    for b in bad:
        print(b)
    print(f'{len(pages)} pages, {len(bad)} broken links')
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
