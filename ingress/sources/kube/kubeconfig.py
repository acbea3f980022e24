# -*- test-case-name: tests.proxy.test_command_line -*-
"""
A kubeconfig (or a pod's in-cluster configuration) checked once, when the command line is: what the client will load later
(L{ingress.sources.kube.client.KubeClient}), loaded now by the same C{kubernetes}
config loader, so that a file it cannot use is one line and exit status 1 before any
listener opens.

Loaded only when the first informer started, a malformed file (C{this: is: not: yaml: [})
raised from inside the application's start: some 90 lines of traceback, and the process
stayed up, its HTTP and admin ports open and answering nothing, the table-build thread
keeping the interpreter alive.
"""

from __future__ import annotations

import os
import ssl
from typing import Optional

import yaml
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

from ingress.sources.kube.client import SERVICE_ACCOUNT_DIRECTORY

_LOADER_PREFIX = "Invalid kube-config file. "  # what the loader puts before most of its messages


def kubeconfig_problem(path: str) -> Optional[str]:
    """
    Why the kubeconfig at C{path} cannot be used, in one line; None when it can.

    Checked in the order a reader would: it is a file that can be read, it is YAML, it is a mapping, the
    loader takes it (current context, its cluster and user, the files they name), it names a
    server, and the certificates and key it names are ones TLS can load.
    """
    if not os.path.isfile(path):
        return "is not a file"
    try:
        with open(path, encoding="utf-8") as file:
            text = file.read()
    except OSError as error:
        return f"cannot be read: {error.strerror or error}"
    except UnicodeDecodeError:
        return "is not a text file"
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as error:
        return f"is not YAML: {_yaml_error(error)}"
    if document is None:
        return "is empty"
    if not isinstance(document, dict):
        return "is not a kubeconfig: a YAML mapping of clusters, contexts, users and current-context was expected"
    configuration = k8s_client.Configuration()
    try:
        k8s_config.load_kube_config(config_file=path, client_configuration=configuration)
    except Exception as error:  # whatever the loader raised (ConfigException, binascii.Error, TypeError...) is the file's to fix
        return f"cannot be used: {_one_line(str(error)).removeprefix(_LOADER_PREFIX)}"
    if not configuration.host:
        return "cannot be used: its current context's cluster names no server"
    return _tls_problem(configuration)


def in_cluster_problem() -> Optional[str]:
    """
    Why the pod's in-cluster configuration (the service account's token and CA bundle, the
    KUBERNETES_SERVICE_HOST/PORT variables) cannot be used, in one line; None when it can.  Loaded
    now by the same loader the client uses later, for the same reason as a kubeconfig: an empty
    token or a CA bundle that is not one raised from inside the application's start.
    """
    configuration = k8s_client.Configuration()
    try:
        k8s_config.load_incluster_config(client_configuration=configuration)
    except Exception as error:  # ConfigException and whatever else the loader raised: the pod's configuration to fix
        problem: Optional[str] = f"cannot be used: {_one_line(str(error))}"
    else:
        problem = _tls_problem(configuration)
    return None if problem is None else f"the in-cluster configuration ({SERVICE_ACCOUNT_DIRECTORY}) {problem}"


def _tls_problem(configuration: k8s_client.Configuration) -> Optional[str]:
    """The CA bundle and client certificate a connection would load, loaded now."""
    try:
        context = ssl.create_default_context(cafile=configuration.ssl_ca_cert or None)
        if configuration.cert_file:
            context.load_cert_chain(configuration.cert_file, configuration.key_file or None)
    except (ssl.SSLError, OSError) as error:
        what = "its client certificate or key" if configuration.cert_file else "its certificate authority"
        return f"cannot be used: {what} cannot be loaded ({_one_line(str(error))})"
    return None


def _yaml_error(error: yaml.YAMLError) -> str:
    """C{mapping values are not allowed here (line 1, column 9)}: the problem and where, on one line."""
    problem = getattr(error, "problem", None)
    mark = getattr(error, "problem_mark", None)
    if problem is None:
        return _one_line(str(error))
    return f"{problem} (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else str(problem)


def _one_line(text: str) -> str:
    return " ".join(text.split())
