"""The worker pod of a ``scorer: code`` suite: where the sandbox runs in Kubernetes.

The harness container runs the sandbox (bubblewrap as the pod's non-root user, in user
namespaces; docs/sandbox.md), so the container keeps every hardening of the other pods
(non-root, read-only root file system, no privilege escalation, every capability dropped, no
service-account token, default-deny egress) and gains only what creating namespaces needs:

- without a runtime class: ``hostUsers: false`` (Kubernetes user namespaces: the pod's uids,
  and so the sandbox's, map to unprivileged host uids), ``procMount: Unmasked`` (bwrap mounts a
  fresh ``/proc`` for the sandbox's PID namespace; masked paths forbid that), and, for this
  one container, the ``Localhost`` seccomp profile ``k8s/sandbox/evalgate-sandbox.json``
  (the runtime's default profile refuses ``unshare``/``clone`` of new namespaces and ``mount``
  to a container without ``CAP_SYS_ADMIN``; this one allows them and refuses module loading,
  kexec, bpf, ptrace and the like). Pod Security ``restricted`` admits ``Localhost`` profiles;
  the AppArmor profile stays the runtime's default.
- with ``sandbox.runtime_class`` (gVisor, Kata): ``runtimeClassName`` is rendered and the pod
  runs against that runtime's kernel; the seccomp profile is the same.

The probe (``evalgate_sandbox_prepare`` at collection) runs first in every pod and ends it with
exit status 4 (a failed index, not retried) when the sandbox does not hold there. The
aggregation pod runs no code and is left as it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_evalgate.manifest.code import EvalgateSandboxBlock

_JSON = dict[str, Any]
EVALGATE_HARNESS_CONTAINER = "evalgate"
EVALGATE_SECCOMP_PROFILE = "evalgate-sandbox.json"
"""The ``localhostProfile`` a code suite's harness container names (k8s/sandbox/)."""


def evalgate_sandbox_container_security(base: Mapping[str, object], user_namespaces: bool) -> _JSON:
    """The harness container's security context for a code suite, from the hardened ``base``."""
    context: _JSON = {
        **base,
        "seccompProfile": {"type": "Localhost", "localhostProfile": EVALGATE_SECCOMP_PROFILE},
    }
    if user_namespaces:
        context["procMount"] = "Unmasked"
    return context


def evalgate_sandbox_pod(pod: Mapping[str, Any], sandbox: EvalgateSandboxBlock | None) -> _JSON:
    """``pod`` (a worker pod spec) made ready to run sandboxes; unchanged for other suites."""
    if sandbox is None:
        return dict(pod)
    runtime_class = sandbox.runtime_class
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
