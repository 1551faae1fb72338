#!/usr/bin/env bash
# Fails when a tracked C++ file differs from what clang-format (.clang-format) makes of it, and
# names the files. Fix with: git ls-files '*.cpp' '*.h' | xargs clang-format -i
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$OPARA_ROOT"
mapfile -t files < <(git ls-files '*.cpp' '*.h')
if ! clang-format --dry-run --Werror "${files[@]}" 2>/tmp/opara-format.$$; then
  grep -o '^[^:]*\.\(cpp\|h\)' /tmp/opara-format.$$ | sort -u | sed 's/^/not formatted: /' >&2
  rm -f /tmp/opara-format.$$
  say "run: git ls-files '*.cpp' '*.h' | xargs clang-format -i"
  exit 1
fi
rm -f /tmp/opara-format.$$
say "clang-format: ${#files[@]} files formatted"
