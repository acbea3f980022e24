"""C{python -m ingress audit [options]}: the same as the C{twingress audit} console script."""

from ingress.audit.command import console

if __name__ == "__main__":
    console()
