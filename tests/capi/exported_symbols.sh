#!/usr/bin/env bash
# The shared object exports the C API and nothing else: every defined dynamic symbol is a
# creditloop_* function, and every function creditloop.h declares is among them.
# Usage: exported_symbols.sh NM LIBRARY HEADER
set -euo pipefail
nm=$1 library=$2 header=$3
exported=$("$nm" -D --defined-only "$library" | awk '{print $NF}' | sort -u)
status=0
others=$(grep -v '^creditloop_' <<<"$exported" || true)
if [ -n "$others" ]; then
  echo "exported beyond creditloop_*:" >&2
  head -n 20 <<<"$others" >&2
  echo "($(wc -l <<<"$others") in all)" >&2
  status=1
fi
declared=$(grep -o 'creditloop_[a-z_0-9]*(' "$header" | tr -d '(' | sort -u)
missing=$(comm -23 <(echo "$declared") <(echo "$exported"))
if [ -n "$missing" ]; then
  echo "declared in $(basename "$header") but not exported:" >&2
  echo "$missing" >&2
  status=1
fi
[ $status -eq 0 ] && echo "$(wc -l <<<"$exported") symbols, all creditloop_*, all declared ones"
exit $status
