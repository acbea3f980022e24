"""What watching alone costs a cluster being filled: the floor of the creation ratio.

Run inside the kube tests' network namespace:

    testenv/netns-run .venv/bin/python -m bench watch-floor [--routes 50000]    # ~8 min

Twice, each in a fresh control plane (tests/kube/cluster.py): ROUTES headless Services,
EndpointSlices and Ingresses created as ``convergence.py --headless-services`` creates them, once
with nothing else running and once beside a process that runs twingress's informers (its
Reflectors over every kind twingress watches: list, watch, parse into stores) and builds nothing.
Prints both objects/s, their ratio and the watcher's CPU time. The ratio is what twingress's
creation ratio (``convergence.py --baseline``) cannot beat with its informers as they are.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parents[1]
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(REPO))

import convergence  # noqa: E402
import cpuload  # noqa: E402

from tests.kube import cluster  # noqa: E402


def watch(kubeconfig: str) -> None:
    """Run twingress's Reflectors over every kind it watches, with no build behind them, until killed."""
    from ingress.sources.kube.client import KubeClient
    from ingress.sources.kube.reflector import Reflector
    from ingress.sources.kube.source import RESOURCES

    reflectors = [Reflector(lambda: KubeClient(kubeconfig), r, on_change=lambda: None, on_status=lambda r: None) for r in RESOURCES]
    for reflector in reflectors:
        reflector.start()
    while True:
        time.sleep(1.0)


def rate(routes: int, threads: int, watched: bool) -> tuple[float, Optional[float]]:
    """Objects/s creating ROUTES routes in a fresh control plane, and the watcher's CPU seconds (None: no watcher)."""
    kube = cluster.KubeCluster(cluster.bin_dir(), Path(tempfile.mkdtemp(prefix="twingress-watch-floor-")) / "kube")
    watcher: Optional[subprocess.Popen[bytes]] = None
    try:
        kube.start()
        api = convergence.Api(kube.kubeconfig)
        api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": convergence.SCALE_NS}})
        if watched:
            watcher = subprocess.Popen([sys.executable, __file__, "--watch", str(kube.kubeconfig)], cwd=REPO)
            time.sleep(3.0)  # listed and watching
        seconds, _ = convergence.create_scale(api, 0, routes, threads, headless=True)
        cpu = None
        if watcher is not None:
            cpu = cpuload.process_cpu_seconds(watcher.pid)
        return 3 * routes / seconds, cpu
    finally:
        if watcher is not None:
            watcher.kill()
            watcher.wait()
        kube.stop()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--routes", type=int, default=50000, help="routes created (x3 objects) in each run (50000)")
    p.add_argument("--threads", type=int, default=12, help="creating threads (12, as convergence.py)")
    p.add_argument("--watch", metavar="KUBECONFIG", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.watch:
        watch(args.watch)
        return 0
    watched, cpu = rate(args.routes, args.threads, watched=True)
    alone, _ = rate(args.routes, args.threads, watched=False)
    print(f"{3 * args.routes} objects: {alone:.0f}/s alone, {watched:.0f}/s beside twingress's informers ({watched / alone:.2f}x); the watcher's CPU {cpu:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
