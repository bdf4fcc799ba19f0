#!/usr/bin/env bash
# Print the command of a Python of at least 3.11 on this machine, or fail saying what was found.
# $PYTHON, when set, is the only candidate; otherwise python3, then python3.13, 3.12, 3.11.
set -u
if [ -n "${PYTHON:-}" ]; then candidates=("$PYTHON"); else
  candidates=(python3 python3.13 python3.12 python3.11)
fi
found=""
for py in "${candidates[@]}"; do
  version=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null) || continue
  found="$found $py=$version"
  if "$py" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "$py"
    exit 0
  fi
done
echo "no Python 3.11 or newer found (tried: ${candidates[*]}; found:${found:- none});" \
  "install one, or set PYTHON=/path/to/python3.x" >&2
exit 1
