"""The names of the autograd nodes the eager layers' entry points record (``grad_fn.name()``)."""


def cpp_node(op: str) -> str:
    """``library.<op>_eager``'s node on the CPU with the C++ kernels: csrc/eager_autograd.cpp's ``<Op>Node``."""
    return "torch::autograd::CppNode<evonorm::{}Node>".format(op.title().replace("_", ""))


def python_node(op: str) -> str:
    """The node of ``library.PYTHON_AUTOGRAD[op]``, the entry on other devices and without the C++ kernels."""
    return f"{op}_eagerBackward"
