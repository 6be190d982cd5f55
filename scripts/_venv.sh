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
    echo "evalgate: installing into .venv (first run takes a minute or two)" >&2
    "$evalgate_venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip >&2
    "$evalgate_venv/bin/python" -m pip install --quiet --disable-pip-version-check -e "$evalgate_root[test]" >&2
    echo "$evalgate_want" > "$evalgate_stamp"
fi
# Code scoring (SPEC section 11) runs model-written code in bubblewrap where it is installed. As
# root with apt-get at hand, install Debian's bubblewrap once, quietly; never fail the script over
# it: without bwrap the sandbox falls back to unshare, and its bwrap tests skip with the reason.
if [ "$(id -u)" = 0 ] && ! command -v bwrap >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
    echo "evalgate: installing bubblewrap with apt-get (the code-scoring sandbox)" >&2
    if ! { apt-get -qq -o DPkg::Lock::Timeout=120 update >/dev/null 2>&1 \
        && DEBIAN_FRONTEND=noninteractive apt-get -qq -o DPkg::Lock::Timeout=120 install -y \
            --no-install-recommends bubblewrap >/dev/null 2>&1; }; then
        echo "evalgate: bubblewrap not installed (apt-get failed); bwrap sandbox tests will skip" >&2
    fi
fi
# Debian's chromium renders report.html in the browser test (tests/test_report_html.py): as root
# with apt-get at hand, install it like bubblewrap, quietly and never failing the script. Tried
# once per .venv (a stamp file), so a machine without a package mirror is not retried on every
# run; the browser tests then skip and say why.
evalgate_chromium_tried="$evalgate_venv/.evalgate-chromium-tried"
if [ "$(id -u)" = 0 ] && ! command -v chromium >/dev/null 2>&1 \
    && command -v apt-get >/dev/null 2>&1 && [ ! -f "$evalgate_chromium_tried" ]; then
    touch "$evalgate_chromium_tried"
    echo "evalgate: installing chromium with apt-get (the report browser test)" >&2
    if ! { apt-get -qq -o DPkg::Lock::Timeout=300 update >/dev/null 2>&1 \
        && DEBIAN_FRONTEND=noninteractive apt-get -qq -o DPkg::Lock::Timeout=300 install -y \
            --no-install-recommends chromium >/dev/null 2>&1; }; then
        echo "evalgate: chromium not installed (apt-get failed); browser tests will skip" >&2
    fi
fi
export PATH="$evalgate_venv/bin:$PATH"
