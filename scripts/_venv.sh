# Sourced by scripts/demo and scripts/test: make .venv and install the project with its test
# extras when pyproject.toml changed since the last install. Needs only python3 (3.11+) and the
# package registry.
set -euo pipefail
evalgate_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
evalgate_venv="$evalgate_root/.venv"
evalgate_python="${PYTHON:-python3}"
if [ ! -x "$evalgate_venv/bin/python" ]; then
    "$evalgate_python" -m venv "$evalgate_venv"
fi
evalgate_stamp="$evalgate_venv/.evalgate-installed"
evalgate_want="$(sha256sum "$evalgate_root/pyproject.toml" | cut -d' ' -f1)"
if [ ! -f "$evalgate_stamp" ] || [ "$(cat "$evalgate_stamp")" != "$evalgate_want" ]; then
    echo "evalgate: installing the dependencies into .venv (about 15 s here with uv, 80 s with" \
        "pip alone), not again until pyproject.toml changes" >&2
    # uv (from the registry, like every other package) resolves and installs in parallel: 7 s
    # against pip's 80 s for the same set on a fresh clone here (docs/decisions.md, "The test
    # command installs with uv"). Where uv cannot be had, pip does the same install.
    if ! { "$evalgate_venv/bin/python" -m pip install --quiet --disable-pip-version-check uv >&2 \
        && "$evalgate_venv/bin/uv" pip install --quiet --python "$evalgate_venv/bin/python" \
            -e "$evalgate_root[test]" >&2; }; then
        echo "evalgate: uv unavailable or failed; installing with pip" >&2
        "$evalgate_venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip >&2
        "$evalgate_venv/bin/python" -m pip install --quiet --disable-pip-version-check -e "$evalgate_root[test]" >&2
    fi
    echo "$evalgate_want" > "$evalgate_stamp"
fi
# As root with apt-get at hand, install a Debian package whose binary some tests run, once and
# quietly; never fail the script over it: without the binary those tests skip with the reason.
evalgate_apt() {  # BINARY PACKAGE WHY TESTS
    if [ "$(id -u)" = 0 ] && ! command -v "$1" >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
        echo "evalgate: installing $2 with apt-get ($3)" >&2
        if ! { apt-get -qq -o DPkg::Lock::Timeout=120 update >/dev/null 2>&1 \
            && DEBIAN_FRONTEND=noninteractive apt-get -qq -o DPkg::Lock::Timeout=120 install -y \
                --no-install-recommends "$2" >/dev/null 2>&1; }; then
            echo "evalgate: $2 not installed (apt-get failed); $4 tests will skip" >&2
        fi
    fi
}
# Code scoring (SPEC section 11) runs model-written code in bubblewrap where it is installed;
# without bwrap the sandbox falls back to unshare.
evalgate_apt bwrap bubblewrap "the code-scoring sandbox" "bwrap sandbox"
# The online-canary tests (SPEC section 15) start a real Prometheus (the binary; no service).
evalgate_apt prometheus prometheus "the canary check tests" "canary check"
# The report browser tests render report.html in Debian's chromium (headless, no service).
evalgate_apt chromium chromium "the report browser tests" "report browser"
export PATH="$evalgate_venv/bin:$PATH"
