#!/usr/bin/env bash
# Installs the peers of the benchmark's peers section (`cargo bench --bench load -- --peers`), pinned
# in fastmcp.txt and contextforge.txt (the top-level package first, then a full pip freeze), each
# into a virtual environment under target/bench-peers/: FastMCP with python3, ContextForge with
# Python 3.12 (python3.12 on PATH, or pyenv's). Installs again only when a pin file changed (each
# venv keeps a copy as .pins, written last). Needs PyPI; never run by CI.
#
#   bench/peers/setup.sh        # idempotent; the launchers are fastmcp_proxy.py and contextforge.sh
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
venvs="$root/target/bench-peers"

python312() {
  if python3.12 -c '' 2>/dev/null; then
    echo python3.12
    return
  fi
  local found
  found=$(compgen -G "${PYENV_ROOT:-$HOME/.pyenv}/versions/3.12*/bin/python3.12" | sort -V | tail -n 1 || true)
  [[ -n $found ]] || { echo "bench/peers/setup.sh: ContextForge needs Python 3.12; none found" >&2; exit 1; }
  echo "$found"
}

# install NAME PYTHON: the venv NAME from NAME.txt, unless its stamp matches.
install() {
  local name=$1 python=$2 venv="$venvs/$1" pins="$here/$1.txt"
  if [[ -x $venv/bin/python ]] && cmp -s "$pins" "$venv/.pins"; then
    return
  fi
  echo "bench/peers/setup.sh: installing $name into $venv" >&2
  rm -rf "$venv"
  "$python" -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check --no-input -r "$pins" >&2
  cp "$pins" "$venv/.pins"
}

mkdir -p "$venvs"
install fastmcp python3
install contextforge "$(python312)"
