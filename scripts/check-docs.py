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
        # every engine/ path the page names (`engine/model/model.c`, `engine/plan/study/`) exists: the engine's
        # files move between folders, and a page would keep the old place. A file a worked example adds
        # (`engine/plan/study/halves.c`) need only have its folder, a stage's: nothing lives in engine/ itself.
        for m in re.finditer(r'(?<![\w/.])engine/[\w./<>-]*[\w/>]', text):
            path = m.group(0)
            parent = os.path.dirname(path.rstrip('/'))
            if not os.path.exists(os.path.join(root, path)) and (
                    parent == 'engine' or not os.path.isdir(os.path.join(root, parent))):
                bad.append(f'{page}: {path} (no such file or folder)')
    for b in bad:
        print(b)
    print(f'{len(pages)} pages, {len(bad)} broken links')
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
