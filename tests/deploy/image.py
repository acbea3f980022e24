"""
The twingress image as `make image` builds it (testenv/image.sh), for the tests that run it.

``testenv/image.sh --print`` names the image, its rollout tag and its archive (for a node's
runtime to import); ``testenv/podman`` is podman as this machine runs it (runc, no ulimits).
The image is never built here: building needs the Debian mirror and PyPI, which the test network
namespace does not reach, so `make test` builds it first.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

from tests.support import ROOT, unavailable

PODMAN = ROOT / "testenv" / "podman"
# The image's labels that testenv/image.sh adds at build time (not the Dockerfile: a user's build has none).
TREE_LABEL = "io.twingress.test.tree"


def podman(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(PODMAN), *args], capture_output=True, text=True, check=check, timeout=timeout)




def printed(command: Sequence[str]) -> dict[str, str]:
    """The NAME=value lines a testenv script prints."""
    out = subprocess.run(command, capture_output=True, text=True, check=True, cwd=ROOT).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


@dataclass(frozen=True)
class Image:
    name: str
    rollout_name: str
    archive: str
    tree: str
    size: int

    def run(self, *args: str, options: Sequence[str] = (), timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """
        ``podman run --rm`` as the DaemonSet runs the container: read-only root, every capability
        dropped but NET_BIND_SERVICE, no_new_privs; and no network (podman's default network would
        need a CNI bridge and iptables, and nothing run here needs one).
        """
        return podman("run", "--rm", "--network=none", *DAEMONSET_LIKE, *options, self.name, *args, check=False, timeout=timeout)


# What k8s/base/daemonset.yaml's securityContext asks of the runtime: readOnlyRootFilesystem (and
# no tmpfs a Kubernetes runtime would not add; the DaemonSet mounts its own /tmp), capabilities
# drop ALL + add NET_BIND_SERVICE, allowPrivilegeEscalation: false.
DAEMONSET_LIKE = (
    "--read-only",
    "--read-only-tmpfs=false",
    "--cap-drop=ALL",
    "--cap-add=NET_BIND_SERVICE",
    "--security-opt=no-new-privileges",
)


@cache
def built_image() -> Image:
    """The image `make image` built from the current tracked tree; skips or fails (see L{unavailable}) without it."""
    if shutil.which("podman") is None:
        unavailable("podman is not installed: run testenv/system-packages.sh (make test does)")
    names = printed([str(ROOT / "testenv" / "image.sh"), "--print"])
    found = podman("image", "inspect", "--format", "{{.Size}} {{index .Labels \"" + TREE_LABEL + "\"}}", names["IMAGE"], check=False)
    if found.returncode != 0:
        unavailable(f"no image {names['IMAGE']}: run `make image` (make test does): {found.stderr.strip()}")
    size, tree = found.stdout.split()
    return Image(names["IMAGE"], names["ROLLOUT_IMAGE"], names["ARCHIVE"], tree, int(size))
