#!/usr/bin/env bash
# Writes requirements/lock-py<X.Y>.txt for each Python given (default: python3.11 python3.12):
# the exact versions, transitive ones included, that a fresh venv gets from the package index
# today for torch ($TORCH_SPEC) and `speculab[test,lint,ui]`. `make install` installs from it.
#
# Only torch's CPU build belongs in the lock: where pip can reach no CPU build for a Python
# (here none for 3.12; set TORCH_INDEX=https://download.pytorch.org/whl/cpu where that index
# is reachable), it takes PyPI's CUDA build, and the CUDA runtime that build alone pulls in
# (nvidia-*, cuda-*, triton) is left out of the lock.
set -euo pipefail
cd "$(dirname "$0")/.."
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
index=()
[ -n "${TORCH_INDEX:-}" ] && index=(--extra-index-url "$TORCH_INDEX")
pythons=("$@")
[ ${#pythons[@]} -gt 0 ] || pythons=(python3.11 python3.12)
for python in "${pythons[@]}"; do
  version=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  venv=$(mktemp -d)
  trap 'rm -rf "$venv"' EXIT
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip
  "$venv/bin/python" -m pip install -q "${index[@]}" "$TORCH_SPEC"
  "$venv/bin/python" -m pip install -q "${index[@]}" -e ".[test,lint,ui]"
  "$venv/bin/python" -m pip check
  lock=requirements/lock-py$version.txt
  {
    echo "# The tested versions for Python $version: written by \`make lock\` (tools/lock.sh) on $(date -u +%F)."
    echo "# torch is the CPU build ($TORCH_SPEC); \`make install\` installs exactly these, then speculab itself."
    "$venv/bin/python" -m pip freeze --all --exclude-editable | grep -viE '^(nvidia-|cuda-|triton==)' | sed 's/^torch==\([^+]*\)+.*/torch==\1/'
  } >"$lock"
  echo "wrote $lock ($(grep -vc '^#' "$lock") packages)"
  rm -rf "$venv"
done
