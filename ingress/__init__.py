"""twingress: a Kubernetes ingress proxy with an embedded controller, on Twisted."""

import os

__version__ = "0.1.0"


def _refuse_stale_compiled_modules() -> None:
    """
    In a source checkout, refuse to start on a compiled module older than its source.

    Python imports an extension module (C{make compiled}) in place of the .py beside it, so
    after an edit the old compiled code would run silently.  Installed packages are left
    alone: installers do not keep build-time file times.
    """
    package = os.path.dirname(os.path.abspath(__file__))
    if not os.path.exists(os.path.join(os.path.dirname(package), "setup.py")):
        return
    for folder, _, names in os.walk(package):
        for name in names:
            if name.endswith(".so"):
                source = os.path.join(folder, name.split(".", 1)[0] + ".py")
                if os.path.exists(source) and os.path.getmtime(source) > os.path.getmtime(os.path.join(folder, name)):
                    raise ImportError(f"{source} is newer than its compiled module {name}: run `make compiled` again, or `make pure`")


_refuse_stale_compiled_modules()
