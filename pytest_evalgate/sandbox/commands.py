"""The command line that builds one sandbox, for each isolation.

**bwrap** (as root, first ``setpriv`` drops to the execution's unprivileged uid, so that
RLIMIT_NPROC binds: a root-mapped user namespace would be exempt from it)::

    [setpriv --reuid=U --regid=U --clear-groups --inh-caps=-all --bounding-set=-all --]
    unshare --user --map-user=U --map-group=U --net --
    bwrap --unshare-all --share-net --unshare-user --disable-userns --die-with-parent
          --new-session --cap-drop ALL --uid U --gid U --hostname evalgate-sandbox --clearenv
          --info-fd I --ro-bind /usr /usr ... --proc /proc --dev /dev --size N --tmpfs /work
          --remount-ro / -- PYTHON -I -B -c DRIVER FD

bwrap's outer process may exit before the sandbox's process 1 has finished tearing the PID
namespace down; ``--info-fd`` tells the harness that process's pid, so it waits for it too.

``unshare --net`` makes the network namespace before bwrap runs, and ``--share-net`` keeps it:
bwrap's own ``--unshare-net`` would bring the loopback up, and no interface may be up. The
namespace belongs to a user namespace the code is not in, so the code can never bring ``lo`` up.

**unshare** (root only: it mounts): ``setpriv --pdeathsig KILL -- unshare --mount --net --pid
--ipc --uts --cgroup --fork --kill-child=SIGKILL -- /bin/sh -c SETUP ...``. The setup script
(``_SETUP``, run as root inside the new namespaces) mounts a tmpfs root on the host folder it is
given (visible in the new mount namespace only), binds the view read-only, mounts ``/proc`` and
the work tmpfs, remounts the root read-only, then ``chroot``s, empties the environment and drops
to the unprivileged uid with no capabilities and ``no_new_privs`` before the driver starts.
Process 1 of the PID namespace is a shell running as that uid, so the code is never process 1.

**none**: the driver alone, as the harness's user, in a host work folder. No isolation.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path

from pytest_evalgate.sandbox.layout import EVALGATE_WORKDIR, EvalgateLayout
from pytest_evalgate.sandbox.tools import EvalgateTools

_MB = 1024 * 1024
_MASK_BYTES = 4096

_BWRAP_FLAGS = (
    "--unshare-all", "--share-net", "--unshare-user", "--disable-userns", "--die-with-parent",
    "--new-session", "--cap-drop", "ALL", "--hostname", "evalgate-sandbox", "--clearenv",
)  # fmt: skip

_UNSHARE_FLAGS = (
    "--mount", "--net", "--pid", "--ipc", "--uts", "--cgroup", "--fork",
    "--kill-child=SIGKILL", "--propagation", "private",
)  # fmt: skip

# Runs as root inside the new namespaces; $1 root mount point, $2 uid, $3 work size in KiB,
# then "bind SRC", "link TARGET PATH" and "mask PATH" words, "--", and the driver's command.
# The last shell stays as process 1 (not exec'd: "; exit $?"), and "env -i" keeps it from
# handing the driver its PWD.
_SETUP = r"""
set -eu
PATH=/usr/sbin:/usr/bin:/sbin:/bin
root=$1 uid=$2 work_kb=$3
shift 3
mount -t tmpfs -o size=1m,mode=0755,nosuid,nodev evalgate-root "$root"
while [ "$1" != -- ]; do
    case $1 in
    bind) mkdir -p "$root$2"; mount --bind "$2" "$root$2"
          mount -o remount,bind,ro,nosuid,nodev "$root$2"; shift 2 ;;
    link) ln -s "$2" "$root$3"; shift 3 ;;
    mask) mount -t tmpfs -o ro,size=4k,mode=0555 evalgate-mask "$root$2"; shift 2 ;;
    *) echo "evalgate setup: unknown word $1" >&2; exit 97 ;;
    esac
done
shift
mkdir "$root/proc" "$root/dev" "$root/work"
mount -t proc -o nosuid,nodev,noexec proc "$root/proc"
for dev in null zero full random urandom; do
    touch "$root/dev/$dev"; mount --bind "/dev/$dev" "$root/dev/$dev"
done
mount -t tmpfs -o "size=${work_kb}k,mode=0700,uid=$uid,gid=$uid,nosuid,nodev" evalgate-work \
    "$root/work"
ln -s /work "$root/tmp"
echo evalgate-sandbox > /proc/sys/kernel/hostname 2>/dev/null || true
mount -o remount,ro,nosuid,nodev "$root"
cd /
exec chroot "$root" /usr/bin/env -i /usr/bin/setpriv --reuid="$uid" --regid="$uid" \
    --clear-groups --inh-caps=-all --bounding-set=-all --no-new-privs --pdeathsig=KILL \
    -- /bin/sh -c '/usr/bin/env -i "$@"; exit $?' evalgate-init "$@"
"""


@dataclass(frozen=True)
class EvalgatePlan:
    """Everything one sandbox's command line depends on.

    ``host_dir``: for unshare, the empty host folder the sandbox root is mounted on; for none,
    the host work folder; for bwrap, ``None`` (bwrap needs no host folder). ``info_fd``: the
    write end of bwrap's ``--info-fd`` pipe (bwrap only).
    """

    isolation: str
    uid: int
    layout: EvalgateLayout
    work_mb: int
    report_fd: int
    host_dir: str | None
    info_fd: int | None = None

    @property
    def pass_fds(self) -> tuple[int, ...]:
        """The descriptors the sandbox's first process inherits besides 0, 1 and 2."""
        return (self.report_fd,) if self.info_fd is None else (self.report_fd, self.info_fd)

    @property
    def workdir(self) -> str:
        """The work folder as the driver sees it."""
        if self.isolation == "none":
            assert self.host_dir is not None
            return self.host_dir
        return EVALGATE_WORKDIR


@functools.cache
def evalgate_driver_source() -> str:
    """The source of ``driver.py``, the program the sandbox's interpreter runs."""
    return Path(__file__).with_name("driver.py").read_text(encoding="utf-8")


def evalgate_command(plan: EvalgatePlan, tools: EvalgateTools) -> list[str]:
    """The argv that builds ``plan``'s sandbox and runs the driver in it."""
    if plan.isolation == "bwrap":
        return _bwrap(plan, tools)
    if plan.isolation == "unshare":
        return _unshare(plan, tools)
    return _driver(plan)


def _driver(plan: EvalgatePlan) -> list[str]:
    interpreter = plan.layout.interpreter
    return [interpreter, "-I", "-B", "-c", evalgate_driver_source(), str(plan.report_fd)]


def _drop_privileges(plan: EvalgatePlan, tools: EvalgateTools) -> list[str]:
    """As root, become the execution's unprivileged uid first; otherwise nothing to drop."""
    if os.geteuid() != 0:
        return []
    assert tools.setpriv is not None
    uid = plan.uid
    return [
        tools.setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
        "--inh-caps=-all", "--bounding-set=-all", "--",
    ]  # fmt: skip


def _bwrap(plan: EvalgatePlan, tools: EvalgateTools) -> list[str]:
    assert tools.bwrap is not None and tools.unshare is not None
    uid = str(plan.uid)
    netns = [tools.unshare, "--user", f"--map-user={uid}", f"--map-group={uid}", "--net", "--"]
    ids = ["--uid", uid, "--gid", uid]
    if plan.info_fd is not None:
        ids += ["--info-fd", str(plan.info_fd)]
    return [
        *_drop_privileges(plan, tools), *netns, tools.bwrap, *_BWRAP_FLAGS, *ids,
        *_bwrap_view(plan), "--", *_driver(plan),
    ]  # fmt: skip


def _bwrap_view(plan: EvalgatePlan) -> list[str]:
    layout, view = plan.layout, []
    for bind in layout.binds:
        view += ["--ro-bind", bind, bind]
    for target, path in layout.symlinks:
        view += ["--symlink", target, path]
    for mask in layout.masks:
        view += ["--size", str(_MASK_BYTES), "--tmpfs", mask, "--remount-ro", mask]
    view += ["--proc", "/proc", "--dev", "/dev", "--remount-ro", "/dev"]
    view += ["--size", str(plan.work_mb * _MB), "--tmpfs", EVALGATE_WORKDIR]
    view += ["--symlink", EVALGATE_WORKDIR, "/tmp", "--chdir", EVALGATE_WORKDIR]
    return [*view, "--remount-ro", "/"]


def _unshare(plan: EvalgatePlan, tools: EvalgateTools) -> list[str]:
    assert tools.unshare is not None and tools.setpriv is not None and plan.host_dir
    setup = ["/bin/sh", "-c", _SETUP, "evalgate-setup", plan.host_dir]
    sizes = [str(plan.uid), str(plan.work_mb * 1024)]
    return [
        tools.setpriv, "--pdeathsig=KILL", "--", tools.unshare, *_UNSHARE_FLAGS, "--",
        *setup, *sizes, *_unshare_view(plan.layout), "--", *_driver(plan),
    ]  # fmt: skip


def _unshare_view(layout: EvalgateLayout) -> list[str]:
    words: list[str] = []
    for bind in layout.binds:
        words += ["bind", bind]
    for target, path in layout.symlinks:
        words += ["link", target, path]
    for mask in layout.masks:
        words += ["mask", mask]
    return words
