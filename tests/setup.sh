#!/usr/bin/env bash
# tests/setup.sh - installs what the test suite needs on a Debian machine.
#
# Called by tests/run.sh (the README's test command) before `cargo test`.
# Idempotent: it checks first and installs only what is missing, so with
# everything present it prints one line and takes well under a second.
#
#   * Debian packages (apt-get; `apt-get update` only when one is missing):
#     ibverbs-utils perftest libibverbs-dev librdmacm-dev python3-pyverbs
#     rdmacm-utils binutils (objdump) gcc chromium chromium-driver ucx-utils
#     openmpi-bin libopenmpi-dev mpich libmpich-dev (ucx_info, ucx_perftest,
#     mpirun, mpiexec.mpich and both mpiccs: tests/middleware.rs).
#     python3-pyverbs is for Debian's /usr/bin/python3, which need not be
#     the `python3` on PATH; chromium and its chromedriver are the headless
#     browser of tests/ladder_browser.rs.
#   * scapy (`scapy.contrib.roce`, the scapy cross-check in
#     tests/scapy_crosscheck.rs) for the interpreter the tests use:
#     $RXE_PYTHON, default `python3` from PATH, with `python3 -m pip install`.
#     `--break-system-packages` is added only if pip refuses with
#     "externally-managed-environment" (Debian's own python3).
#
# apt-get runs as root, or through sudo when not root. Without either it
# names the missing packages and the command to run, and exits 1.
#
# Env: RXE_PYTHON       the Python the tests run (default python3)
#      RXE_SKIP_SCAPY=1 do not install scapy (the cross-check then skips)
set -euo pipefail
cd "$(dirname "$0")/.."   # not tests/: its scapy/ folder is not the package

PY=${RXE_PYTHON:-python3}
DEB_PACKAGES=(ibverbs-utils perftest libibverbs-dev librdmacm-dev python3-pyverbs
              rdmacm-utils binutils gcc chromium chromium-driver ucx-utils
              openmpi-bin libopenmpi-dev mpich libmpich-dev libfabric-bin)

say() { echo "setup: $*" >&2; }

# Packages of "$@" that are not installed (one dpkg-query call for all).
missing_debs() {
    local ok p
    ok=$(dpkg-query -W -f='${Package} ${Status}\n' "$@" 2>/dev/null |
         awk '$2 == "install" && $3 == "ok" && $4 == "installed" { print $1 }') || true
    for p in "$@"; do
        [[ $'\n'$ok$'\n' == *$'\n'$p$'\n'* ]] || echo "$p"
    done
}

apt_updated=0
# Installs Debian packages "$@" (all of them missing) or exits with advice.
apt_install() {
    local as=()
    if ! command -v apt-get >/dev/null 2>&1 || ! command -v dpkg-query >/dev/null 2>&1; then
        say "no apt-get/dpkg here (not Debian?); install these packages yourself: $*"
        exit 1
    fi
    if [ "$(id -u)" != 0 ]; then
        if command -v sudo >/dev/null 2>&1; then
            as=(sudo)
        else
            say "missing Debian packages: $*"
            say "this needs root and sudo is not installed; as root, run:"
            say "    apt-get update && apt-get install -y $*"
            say "then run the tests again (bash tests/run.sh)."
            exit 1
        fi
    fi
    if [ "$apt_updated" = 0 ]; then
        say "apt-get update"
        ${as[@]+"${as[@]}"} env DEBIAN_FRONTEND=noninteractive apt-get update -q
        apt_updated=1
    fi
    say "apt-get install $*"
    ${as[@]+"${as[@]}"} env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@"
    local still
    still=$(missing_debs "$@")
    if [ -n "$still" ]; then
        say "still not installed after apt-get install: $(echo $still)"
        exit 1
    fi
}

installed=()

# --- 1. Debian packages -----------------------------------------------------
if command -v dpkg-query >/dev/null 2>&1; then
    mapfile -t need < <(missing_debs "${DEB_PACKAGES[@]}")
else
    need=("${DEB_PACKAGES[@]}")
fi
if [ "${#need[@]}" -gt 0 ]; then
    apt_install "${need[@]}"
    installed+=("${need[@]}")
fi

# --- 2. scapy for the tests' Python -----------------------------------------
have_scapy() { "$PY" -c 'import scapy.contrib.roce' >/dev/null 2>&1; }

if [ "${RXE_SKIP_SCAPY:-0}" = 1 ]; then
    say "RXE_SKIP_SCAPY=1: not installing scapy (the scapy cross-check skips)"
elif ! have_scapy; then
    if ! command -v "$PY" >/dev/null 2>&1; then
        say "no Python interpreter '$PY' (RXE_PYTHON or python3 on PATH)"
        exit 1
    fi
    if ! "$PY" -m pip --version >/dev/null 2>&1; then
        # Debian's python3 has pip only as a package; others have ensurepip.
        if [ "$(readlink -f "$(command -v "$PY")")" = "$(readlink -f /usr/bin/python3 2>/dev/null)" ] &&
           command -v dpkg-query >/dev/null 2>&1; then
            apt_install python3-pip
            installed+=(python3-pip)
        else
            say "$PY has no pip; trying $PY -m ensurepip"
            "$PY" -m ensurepip --upgrade
        fi
    fi
    say "$PY -m pip install scapy"
    pip_install=("$PY" -m pip install --quiet --disable-pip-version-check scapy)
    if ! out=$("${pip_install[@]}" 2>&1); then
        if grep -q 'externally-managed-environment' <<<"$out"; then
            say "pip refused (externally-managed-environment); retrying with --break-system-packages"
            "${pip_install[@]}" --break-system-packages
        else
            echo "$out" >&2
            say "pip install scapy failed"
            exit 1
        fi
    elif [ -n "$out" ]; then
        echo "$out" >&2
    fi
    if ! have_scapy; then
        say "scapy installed but '$PY -c \"import scapy.contrib.roce\"' still fails"
        exit 1
    fi
    installed+=(scapy)
fi

if [ "${#installed[@]}" -gt 0 ]; then
    say "installed: ${installed[*]}"
else
    say "nothing to install"
fi
