# Sourced by the scripts that install torch into a venv.
#   venv_install WHO VENV REQUIREMENT...
# Installs with uv's `uv pip install` (pip's resolution, a parallel installer
# that keeps unpacked wheels in its cache, ~/.cache/uv): torch 2.6 and its
# CUDA libraries took 31 s on 2 cores with an empty cache and 30 s from the
# cache, where pip took 88 s. Bytecode is compiled at install time as pip does
# (an interpreter with PYTHONDONTWRITEBYTECODE set would otherwise compile
# torch again in every process). uv comes from the venv's own pip (one small
# wheel) unless one is on PATH; where it cannot be had, or its install fails
# (an index or certificate uv does not read from pip's configuration), pip
# installs instead.
venv_install() {
  local who=$1 venv=$2
  shift 2
  local uv
  uv=$(command -v uv || true)
  if [[ -z $uv ]]; then
    [[ -x $venv/bin/uv ]] ||
      "$venv/bin/python" -m pip install -q --disable-pip-version-check uv >/dev/null 2>&1 || true
    [[ -x $venv/bin/uv ]] && uv=$venv/bin/uv
  fi
  if [[ -n $uv ]]; then
    "$uv" pip install -q --native-tls --compile-bytecode --python "$venv/bin/python" "$@" &&
      return 0
    echo "$who: uv could not install into $venv; trying pip" >&2
  fi
  "$venv/bin/python" -m pip install -q --disable-pip-version-check "$@"
}
