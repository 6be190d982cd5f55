"""The worker pod of a ``scorer: code`` suite: where the sandbox runs in Kubernetes.

The harness container runs the sandbox (bubblewrap as the pod's non-root user, in user
namespaces; docs/sandbox.md), so the container keeps every hardening of the other pods
(non-root, read-only root file system, no privilege escalation, every capability dropped, no
service-account token, default-deny egress) and gains only what creating namespaces needs:

- without a runtime class: ``hostUsers: false`` (Kubernetes user namespaces: the pod's uids,
  and so the sandbox's, map to unprivileged host uids), ``procMount: Unmasked`` (bwrap mounts a
  fresh ``/proc`` for the sandbox's PID namespace; masked paths forbid that), and the seccomp
  and AppArmor profiles ``Unconfined`` for this one container (the runtime's default seccomp
  profile refuses ``unshare``/``clone`` of new namespaces to a container without
  ``CAP_SYS_ADMIN``); a node-installed ``Localhost`` profile that allows exactly those calls is
  the tighter choice where clusters have one (docs/kubernetes.md).
- with ``sandbox.runtime_class`` (gVisor, Kata): ``runtimeClassName`` is rendered and the pod
  runs against that runtime's kernel; the container profiles are the same.

The probe (``evalgate_sandbox_prepare`` at collection) runs first in every pod and ends it with
exit status 4 (a failed index, not retried) when the sandbox does not hold there. The
aggregation pod runs no code and is left as it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_JSON = dict[str, Any]
EVALGATE_HARNESS_CONTAINER = "evalgate"


def evalgate_sandbox_container_security(base: Mapping[str, Any], user_namespaces: bool) -> _JSON:
    """The harness container's security context for a code suite, from the hardened ``base``."""
    context: _JSON = {
        **base,
        "seccompProfile": {"type": "Unconfined"},
        "appArmorProfile": {"type": "Unconfined"},
    }
    if user_namespaces:
        context["procMount"] = "Unmasked"
    return context


def evalgate_sandbox_pod(pod: Mapping[str, Any], sandbox: Mapping[str, Any] | None) -> _JSON:
    """``pod`` (a worker pod spec) made ready to run sandboxes; unchanged for other suites."""
    if sandbox is None:
        return dict(pod)
    runtime_class = sandbox.get("runtime_class")
    user_namespaces = runtime_class is None
    out: _JSON = {**pod, "containers": [_harness(c, user_namespaces) for c in pod["containers"]]}
    if runtime_class is not None:
        out["runtimeClassName"] = runtime_class
    else:
        out["hostUsers"] = False
    return out


def _harness(container: Mapping[str, Any], user_namespaces: bool) -> _JSON:
    if container["name"] != EVALGATE_HARNESS_CONTAINER:
        return dict(container)
    context = evalgate_sandbox_container_security(container["securityContext"], user_namespaces)
    return {**container, "securityContext": context}
