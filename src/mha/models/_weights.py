"""Finding and checking the pretrained weights that an installed package ships.

The pretrained models (:mod:`mha.models.minilm`, :mod:`mha.models.smollm2`) read their
weights from a pip package, found without importing it (:func:`package_file`), and check the
file's SHA-256 (:func:`check_digest`) before they read it.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from mha.core._checks import arguments


def package_file(package: str, name: str, install_hint: str, size: str) -> Path:
    """The path of ``name`` inside the installed package ``package``, which is not imported.

    Args:
        package: import name of the weights package.
        name: the file's path relative to the package's folder.
        install_hint: the command that installs the package, for the messages.
        size: the download's size and dependencies, for the message of a missing package.

    Returns:
        The file's path.

    Raises:
        ModuleNotFoundError: if the package is not installed (the message says how to
            install it).
        FileNotFoundError: if the package holds no such file.
        ValueError: if ``package`` is not an absolute import name (empty, or with a part
            that is not an identifier).
        TypeError: if ``package`` is not a string.
    """
    arguments.text("package", package)
    if not all(part.isidentifier() for part in package.split(".")):
        raise ValueError(f"package must be an absolute import name; got package={package!r}")
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError(
            f"the weights package {package!r} is not installed; install it with "
            f"`{install_hint}` ({size})",
            name=package,
        )
    path = Path(spec.origin).parent / name
    if not path.is_file():
        raise FileNotFoundError(
            f"package {package!r} has no {name} under {Path(spec.origin).parent}; "
            f"reinstall it with `{install_hint} --force-reinstall`"
        )
    return path


def check_digest(path: Path, digest: str, expected: str, install_hint: str) -> None:
    """Refuse the weights file ``path`` when its SHA-256 ``digest`` is not ``expected``.

    Raises:
        ValueError: if the digest differs (the file is corrupt or another model).
    """
    if digest != expected:
        raise ValueError(
            f"weights file {path} has SHA-256 {digest}, expected {expected}: the file "
            f"is corrupt or a different model; reinstall with `{install_hint} --force-reinstall`"
        )
