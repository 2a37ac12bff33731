#!/usr/bin/env bash
# Sets up this machine for the whole suite, with no access to GitHub needed:
#   torch 2.14.1 + torchvision 0.29.1, Detectron2, pycocotools, fvcore, torch-fidelity, ray,
#   scikit-learn, timm (benchmark reference only), onnx + onnxruntime + onnxscript (export),
#   pytest, hypothesis, pytest-randomly, pytest-xdist, mutmut, ruff, and this project in editable mode with its
#   C++ CPU kernels compiled.
# It installs into the Python that runs it ($PYTHON, default python3); activate a virtual
# environment first if you want one. Safe to re-run: installed parts are checked and skipped.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python3}"
CONSTRAINTS="$ROOT/tools/constraints.txt"
D2_GIT="https://github.com/facebookresearch/detectron2.git"
D2_OFFLINE_DIST="sal-detectron2==0.7.2"
PIP=("$PY" -m pip install --disable-pip-version-check -c "$CONSTRAINTS")

log() { printf '[install] %s\n' "$*"; }
die() { printf '[install] ERROR: %s\n' "$*" >&2; exit 1; }
trap 'die "failed at line $LINENO: $BASH_COMMAND"' ERR

"$PY" -c 'import sys; assert sys.version_info >= (3, 9), sys.version' \
    || die "$PY is not Python >= 3.9"
log "python: $("$PY" -c 'import sys; print(sys.executable, sys.version.split()[0])')"

# 1. The torch pair. Checked first so a second run does not ask pip to resolve 5 GB again.
if "$PY" -c 'import torch, torchvision, sys; sys.exit(not (torch.__version__.startswith("2.14.1") and torchvision.__version__.startswith("0.29.1")))' 2>/dev/null; then
    log "torch 2.14.1 / torchvision 0.29.1 already installed"
else
    log "installing torch 2.14.1 + torchvision 0.29.1"
    "${PIP[@]}" torch==2.14.1 torchvision==0.29.1
fi

# 2. Detectron2: upstream from git where GitHub is reachable, else the offline PyPI re-upload.
d2_installed() { "$PY" -c 'import detectron2' 2>/dev/null; }

install_d2_offline() {
    # sal-detectron2 0.7.2 is upstream detectron2's Python code in a wheel mis-tagged
    # cp310-none-any (pure Python). pip on 3.11 refuses that file name, so we fetch it for
    # 3.10 and install a copy named py3-none-any. Its compiled _C is for 3.10 and is ignored:
    # detectron2 then runs in pure-Python mode. Its top-level `tools` package goes (below).
    local tmp; tmp="$(mktemp -d)"
    "$PY" -m pip download --disable-pip-version-check --no-deps --python-version 3.10 \
        --only-binary=:all: "$D2_OFFLINE_DIST" -d "$tmp"
    local wheel; wheel="$(ls "$tmp"/sal_detectron2-*.whl)"
    cp "$wheel" "$tmp/$(basename "$wheel" | sed 's/-cp310-none-any\.whl$/-py3-none-any.whl/')"
    "${PIP[@]}" "$tmp"/sal_detectron2-*-py3-none-any.whl
    rm -rf "$tmp"
}

if d2_installed; then
    log "detectron2 already installed"
elif timeout 15 git ls-remote --exit-code "$D2_GIT" HEAD >/dev/null 2>&1; then
    log "GitHub reachable: building detectron2 from $D2_GIT"
    "${PIP[@]}" --no-build-isolation "git+$D2_GIT"
else
    log "GitHub unreachable: installing detectron2 from the offline wheel $D2_OFFLINE_DIST"
    install_d2_offline
fi

# Detectron2's wheels may carry its scripts as a top-level `tools` package: a generic name that
# shadows any other project's `tools` (this one's included), so it is removed. Checked on every
# run, by the files the distribution records.
"$PY" - <<'PYTHON'
import importlib.metadata as metadata
import shutil
from pathlib import Path

for name in ("sal-detectron2", "detectron2"):
    try:
        dist = metadata.distribution(name)
    except metadata.PackageNotFoundError:
        continue
    if any(f.parts[0] == "tools" for f in dist.files or ()):
        path = Path(dist.locate_file("tools"))
        if path.is_dir():
            shutil.rmtree(path)
            print(f"[install] removed {name}'s top-level 'tools' package ({path}): a generic module name")
PYTHON

# 3. This project with every extra (pycocotools, fvcore, torch-fidelity, ray, scikit-learn,
#    timm, onnx/onnxruntime, pytest, hypothesis, pytest-randomly, pytest-xdist, mutmut, ruff, ...), editable, with --no-build-isolation so that setup.py
#    sees the torch installed in step 1 and builds the EvoNorm C++ CPU kernels
#    (evonorm_core.ops._C); that also means the build requirements of pyproject.toml must be
#    here first. Skipped when this checkout was already installed from the same setup.py /
#    pyproject.toml / constraints / kernel sources and flags (a stamp in site-packages records
#    their hash) and its built kernels are current.
SITE="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
STAMP="$SITE/evonorm_suite.install-stamp"
WANT="$ROOT $(cat "$ROOT/setup.py" "$ROOT/pyproject.toml" "$CONSTRAINTS" "$ROOT/evonorm_core/ops/build.py" \
    "$ROOT"/evonorm_core/ops/csrc/* | sha256sum | cut -d' ' -f1) torch $("$PY" -c 'import torch; print(torch.__version__)')"
kernels_built() {  # "yes" when the install-built kernels load and are newer than their sources (no JIT build)
    if EVONORM_JIT=0 "$PY" -c 'import sys; from evonorm_core.ops import extension
sys.exit(extension.status().source != "installed")' >/dev/null 2>&1; then echo yes; else echo no; fi
}
# The stamp's second line records whether the install built the kernels: "yes" must still hold
# (a `git clean` removes them); "no" (no compiler here) is not retried on every run.
if [[ -f "$STAMP" && "$(head -n 1 "$STAMP")" == "$WANT" ]] && "$PY" -c 'import evonorm_core' 2>/dev/null \
        && [[ "$(sed -n 2p "$STAMP")" != "kernels built: yes" || "$(kernels_built)" == yes ]]; then
    log "evonorm-suite[all] already installed from $ROOT ($(sed -n 2p "$STAMP"))"
else
    log "installing the build requirements (pyproject.toml [build-system])"
    "${PIP[@]}" -q "setuptools>=64,<81" wheel
    log "installing evonorm-suite[all] (editable) and its dependencies; compiling the EvoNorm CPU kernels (a few minutes)"
    "${PIP[@]}" -q --no-build-isolation -e "$ROOT[all]"
    printf '%s\nkernels built: %s\n' "$WANT" "$(kernels_built)" > "$STAMP"
fi

# 4. Report what we installed.
"$PY" - <<'PYEOF'
import importlib.metadata as md, pathlib
import detectron2, torch, torchvision
names = {d.metadata["Name"].lower() for d in md.distributions()}
dist = next((n for n in ("detectron2", "sal-detectron2") if n in names), "unknown")
try:
    from detectron2 import _C  # noqa: F401
    ext = "compiled ops (_C) available"
except ImportError:
    ext = "pure-Python mode (no _C)"
print(f"[install] torch {torch.__version__}, torchvision {torchvision.__version__}")
print(f"[install] detectron2 {detectron2.__version__} from distribution '{dist}' at "
      f"{pathlib.Path(detectron2.__file__).parent}, {ext}")
from evonorm_core.ops import extension  # a just-in-time build here would mean the install did not build them
print(f"[install] EvoNorm CPU kernels: {extension.status()}")
PYEOF
log "done"
