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
# Debian's chromium renders report.html in the browser test (tests/test_report_html.py): installed
# like any other system package when we are root and it is missing. Tried once per .venv (a stamp
# file), so a machine without apt or a mirror is not retried on every run; the test then skips
# and says why.
evalgate_chromium_tried="$evalgate_venv/.evalgate-chromium-tried"
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] \
    && command -v apt-get >/dev/null 2>&1 && [ ! -f "$evalgate_chromium_tried" ]; then
    touch "$evalgate_chromium_tried"
    echo "evalgate: installing chromium with apt-get (for the report browser test)" >&2
    export DEBIAN_FRONTEND=noninteractive
    evalgate_apt=(apt-get -o DPkg::Lock::Timeout=300 -y -q)
    { "${evalgate_apt[@]}" install --no-install-recommends chromium >&2 \
        || { "${evalgate_apt[@]}" update >&2 \
             && "${evalgate_apt[@]}" install --no-install-recommends chromium >&2; }; } \
        || echo "evalgate: chromium could not be installed; the browser test will skip" >&2
fi
export PATH="$evalgate_venv/bin:$PATH"
