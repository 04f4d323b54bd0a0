#!/usr/bin/env python3
"""Embed a text file as a C string constant: embed.py INPUT OUTPUT NAME."""
import sys

src, dst, name = sys.argv[1:4]
with open(src, encoding="utf-8") as f:
    text = f.read()
lines = [f"/* generated from {src.split('/')[-1]} by engine/store/embed.py; do not edit */",
         f"static const char {name}[] ="]
for line in text.splitlines(True):
    esc = line.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    lines.append(f'    "{esc}"')
lines[-1] += ";"
with open(dst, "w", encoding="utf-8") as f:
    f.write("\n".join(lines) + "\n")
