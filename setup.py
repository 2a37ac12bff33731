"""Packaging for the EvoNorm suite.

``pip install -e .`` installs the layer library and search engine (``evonorm_core``, torch
only) together with the task packages; the extras pull in what each task needs.
``tools/install.sh`` is the supported way to set up a complete machine, Detectron2 included.
"""
from setuptools import find_packages, setup

EXTRAS = {
    "classification": ["torchvision", "scikit-learn", "tensorboard", "tqdm", "matplotlib", "fvcore"],
    "search": ["torchvision", "scikit-learn", "ray>=2.9", "tqdm", "matplotlib"],
    # detectron2 itself is not on PyPI: tools/install.sh installs it (git or offline wheel).
    "detection": ["pycocotools>=2.0.2", "fvcore", "iopath", "setuptools<81", "tensorboard"],
    "gan": ["torch-fidelity>=0.3", "scipy", "tensorboard", "tqdm", "matplotlib", "h5py"],
    "bench": ["timm"],
    "dev": ["pytest>=7", "pytest-timeout"],
}
EXTRAS["all"] = sorted({req for reqs in EXTRAS.values() for req in reqs})

# Every command-line program, installed as a command; `python search/evolve.py`,
# `python gan/train_biggan.py` and `python tools/*.py` run the same functions.
CONSOLE_SCRIPTS = [
    "evonorm-search = search.evolve:main",
    "evonorm-search-report = search.report:main",
    "evonorm-search-rerank = search.rerank:main",
    "evonorm-train = classification.train:main",
    "evonorm-tables = classification.tables:main",
    "evonorm-tradeoff = classification.tradeoff:main",
    "evonorm-gan = gan.train_biggan:main",
    "evonorm-gan-eval = gan.evaluate:main",
    "evonorm-gan-report = gan.report:main",
    "evonorm-gan-table5 = gan.table5:main",
    "evonorm-detect = detection.train_net:main",
    "evonorm-detect-report = detection.report:main",
    "evonorm-detect-cost = detection.cost:main",
    "evonorm-detect-miniature = detection.miniature:main",
    "evonorm-benchmark = evonorm_core.benchmark:main",
    "evonorm-capture = evonorm_core.capture:main",
]

setup(
    name="evonorm-suite",
    version="0.1.0",
    description="EvoNorm normalization-activation layers, layer search, and the paper's "
    "classification, Mask R-CNN and BigGAN-deep experiments",
    long_description=open("README.md", encoding="utf-8").read() if __import__("os").path.exists("README.md") else "",
    long_description_content_type="text/markdown",
    python_requires=">=3.9",
    packages=find_packages(include=["evonorm_core*", "classification*", "search*", "detection*", "gan*"]),
    package_data={"detection": ["configs/*.yaml"]},
    install_requires=["torch>=2.1", "numpy"],
    extras_require=EXTRAS,
    entry_points={"console_scripts": CONSOLE_SCRIPTS},
    license="Apache-2.0",
    classifiers=["Programming Language :: Python :: 3", "Topic :: Scientific/Engineering :: Artificial Intelligence"],
)
