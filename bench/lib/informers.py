"""
twingress's informers alone: its Reflectors over every kind it watches (list, watch, parse into
stores) with no build behind them, until killed - C{python -m bench.lib.informers KUBECONFIG}.
What watching costs a cluster being filled, apart from building tables (the watch-floor scenario).
"""

from __future__ import annotations

import sys
import time


def main(kubeconfig: str) -> int:
    from ingress.sources.kube.client import KubeClient
    from ingress.sources.kube.reflector import Reflector
    from ingress.sources.kube.source import RESOURCES

    reflectors = [Reflector(lambda: KubeClient(kubeconfig), r, on_change=lambda: None, on_status=lambda r: None) for r in RESOURCES]
    for reflector in reflectors:
        reflector.start()
    print("watching", flush=True)
    while True:
        time.sleep(1.0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
