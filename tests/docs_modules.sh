#!/usr/bin/env bash
# Every module of src/ (a folder directly under it) has its row in the module table of
# docs/ARCHITECTURE.md, a line starting "| `NAME/` |". Usage: docs_modules.sh [SOURCE_DIR]
set -euo pipefail
shopt -s nullglob
root=${1:-$(dirname "$0")/..}
map=$root/docs/ARCHITECTURE.md
[ -f "$map" ] || { echo "docs_modules: $map: no such file, expected the architecture map" >&2; exit 1; }
missing=0
n=0
for dir in "$root"/src/*/; do
  name=$(basename "$dir")
  n=$((n + 1))
  if ! grep -q "^| \`$name/\` |" "$map"; then
    echo "docs_modules: src/$name/ has no row in the module table of docs/ARCHITECTURE.md" \
      "(expected a line starting '| \`$name/\` |')" >&2
    missing=$((missing + 1))
  fi
done
[ "$n" -gt 0 ] || { echo "docs_modules: no folders under $root/src, expected the modules" >&2; exit 1; }
[ "$missing" -eq 0 ] || exit 1
echo "docs_modules: all $n modules of src/ are in docs/ARCHITECTURE.md's module table"
