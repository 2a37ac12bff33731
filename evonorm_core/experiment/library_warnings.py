"""Warnings that third-party libraries raise about their own code, silenced before importing them."""
import warnings


def ignore_jit_script_deprecation() -> None:
    """Hide torch's "`torch.jit.script` is deprecated" ``FutureWarning`` for the rest of the process.

    detectron2 and fvcore decorate helpers with ``torch.jit.script`` at import time, so every
    command that imports them (``--help`` included) would print the warning; it is about their
    code, not the user's. Call it before the first import of either library.
    """
    warnings.filterwarnings("ignore", message=r"`torch\.jit\.script` is deprecated", category=FutureWarning)
