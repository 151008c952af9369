"""flowsim's version.

Releases are git tags (``v0.1.0``); setuptools-scm turns the tag, and the commits since it,
into the version when the package is built or installed (``pip install -e .`` included) and
writes it to ``flowsim/_scm_version.py`` (generated, not in git). Without that file the
installed package's metadata is read; a source tree that was never installed reports
:data:`FALLBACK` with a local ``+unknown`` label.
"""

from __future__ import annotations

#: The version of a source tree that was never installed (keep it at the latest release; the
#: same number is setuptools-scm's ``fallback_version`` for a checkout without git metadata).
FALLBACK = "0.1.0"


def _find_version() -> str:
    try:  # written at install time; importing it is cheaper than reading package metadata
        from ._scm_version import version  # type: ignore[import-not-found, unused-ignore]

        return str(version)
    except ImportError:
        pass
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as metadata_version

    try:
        return metadata_version("flowsim")
    except PackageNotFoundError:
        return FALLBACK + "+unknown"


__version__: str = _find_version()
