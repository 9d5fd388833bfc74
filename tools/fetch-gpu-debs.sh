#!/usr/bin/env bash
# Downloads the Debian 12 packages that tools/gpu-check.sh builds the farm against on a GPU machine
# that has CUDA, CMake, Ninja and a pip PyTorch but no network and none of these packages.
# Run it here, on a Debian machine with the package archive (apt-get download needs no root once
# the package lists exist); it writes .gpu-debs/debs/ (git-ignored) and a MANIFEST of what it holds.
# Only .gpu-debs/debs/ needs to travel with the tree; gpu-check.sh unpacks it into
# .gpu-debs/prefix/ with dpkg -x (or ar + tar, or Python) and never into /.
#
#   bash tools/fetch-gpu-debs.sh [--dir .gpu-debs/debs]
#
# Idempotent: each run downloads the current list into a fresh folder and replaces the old one, so
# packages dropped from the list disappear. Fails when the set exceeds kMaxMib (the device
# runner carries at most 64 MiB with the tree).
set -euo pipefail

readonly kMaxMib=60
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="$repo_root/.gpu-debs/debs"
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) dest="$2"; shift 2 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "fetch-gpu-debs: unknown option '$1'" >&2; exit 2 ;;
  esac
done

# Headers, CMake/pkg-config files and link-time .so names. Why each is here:
dev_packages=(
  cppzmq-dev libzmq3-dev      # find_package(cppzmq) -> FindZeroMQ -> libzmq.so
  nlohmann-json3-dev          # header-only
  libcli11-dev                # header-only
  libboost1.74-dev            # Boost.Interprocess is header-only, but find_package(Boost) wants
                              # BoostConfig.cmake; the whole .deb is ~9 MiB (138 MiB unpacked)
  libgtest-dev libgmock-dev   # TORCHFARM_BUILD_TESTS=ON: find_package(GTest), GTest::gmock
  prometheus-cpp-dev          # supervisor/CMakeLists.txt: find_package(prometheus-cpp REQUIRED);
  libcivetweb-dev civetweb    #   its config find_dependency()s civetweb (whose targets name the
  zlib1g-dev                  #   civetweb binary), ZLIB and CURL, although the farm links only
  libcurl4-openssl-dev libcurl4  # prometheus-cpp::pull; libcurl is found, never linked or loaded
  libsystemd-dev              # pkg_check_modules(libsystemd REQUIRED): sd_notify
  pkgconf-bin libpkgconf3     # find_package(PkgConfig REQUIRED), if the machine has no pkg-config
)
# Shared libraries the binaries load (libzmq5 and what it pulls in, prometheus-cpp, libsystemd0).
# gpu-check.sh puts on LD_LIBRARY_PATH only those whose soname the machine does not already have.
runtime_packages=(
  libzmq5 libsodium23 libpgm-5.3-0 libnorm1 libbsd0 libmd0
  libgssapi-krb5-2 libkrb5-3 libk5crypto3 libkrb5support0 libcom-err2 libkeyutils1 libssl3
  libprometheus-cpp-core1.0 libprometheus-cpp-pull1.0 libprometheus-cpp-push1.0 libcivetweb1
  libsystemd0 libcap2 libgcrypt20 libgpg-error0 liblz4-1 liblzma5 libzstd1
  zlib1g                      # the target of zlib1g-dev's libz.so link
)
# Dependencies assumed present on any machine that runs a pip PyTorch and a C++ compiler (these
# Debian 12 libraries need glibc >= 2.34 and GCC 12's libstdc++, GLIBCXX_3.4.30: Ubuntu 22.04 and
# later), and the ones of libcurl4, which is never loaded. The check below warns about anything
# else left out.
assumed_present=(
  libc6 libgcc-s1 libstdc++6 libc6-dev libc-dev libstdc++-12-dev googletest
  libpgm-dev libsodium-dev libnorm-dev libkrb5-dev libbsd-dev
  libbrotli1 libidn2-0 libldap-2.5-0 libnghttp2-14 libpsl5 librtmp1 libssh2-1
)

if ! command -v apt-get >/dev/null; then
  echo "fetch-gpu-debs: needs apt-get (a Debian 12 machine with the package archive)" >&2
  exit 1
fi
if [ -r /etc/os-release ] && ! grep -q 'VERSION_CODENAME=bookworm' /etc/os-release; then
  echo "fetch-gpu-debs: warning: not Debian 12 (bookworm); the package names above are bookworm's" >&2
fi

all=("${dev_packages[@]}" "${runtime_packages[@]}")
if [ -z "$(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' 2>/dev/null | head -n 1)" ]; then
  echo "fetch-gpu-debs: no package lists; running apt-get update"
  apt-get update -q
fi

mkdir -p "$(dirname "$dest")"
staging="$(mktemp -d "$(dirname "$dest")/debs.new.XXXXXX")"
trap 'rm -rf "$staging"' EXIT
echo "fetch-gpu-debs: downloading ${#all[@]} packages into $dest"
# APT::Sandbox::User=root: the staging folder is not readable by _apt when run as root.
(cd "$staging" && apt-get download -q -o APT::Sandbox::User="$(id -un)" "${all[@]}")

# Every runtime dependency must be in the set or assumed present.
declare -A known=()
for p in "${all[@]}" "${assumed_present[@]}"; do known["$p"]=1; done
missing_deps=0
for deb in "$staging"/*.deb; do
  depends="$(dpkg-deb -f "$deb" Depends Pre-Depends 2>/dev/null | sed -n 's/^[A-Za-z-]*: //p' | tr ',' '\n')"
  while read -r alternative; do
    [ -z "$alternative" ] && continue
    name="${alternative%%[ (|]*}"
    name="${name%%:*}"
    if [ -z "${known[$name]:-}" ]; then
      echo "fetch-gpu-debs: warning: $(dpkg-deb -f "$deb" Package) depends on $name, which is not in the set" >&2
      missing_deps=1
    fi
  done <<<"$depends"
done

{
  echo "# package version kind bytes (written by tools/fetch-gpu-debs.sh on $(date -u +%FT%TZ))"
  for deb in "$staging"/*.deb; do
    package="$(dpkg-deb -f "$deb" Package)"
    kind=runtime
    for p in "${dev_packages[@]}"; do [ "$p" = "$package" ] && kind=dev; done
    printf '%s %s %s %s\n' "$package" "$(dpkg-deb -f "$deb" Version)" "$kind" "$(stat -c %s "$deb")"
  done
} >"$staging/MANIFEST"

total_bytes="$(du -cb "$staging"/*.deb | tail -n 1 | cut -f1)"
total_mib=$(( (total_bytes + 1048575) / 1048576 ))
grep -v "^#" "$staging/MANIFEST" | { column -t 2>/dev/null || cat; }
echo "fetch-gpu-debs: $(ls "$staging"/*.deb | wc -l) .deb files, $total_bytes bytes (${total_mib} MiB)"
if [ "$total_mib" -gt "$kMaxMib" ]; then
  echo "fetch-gpu-debs: FAILED: ${total_mib} MiB exceeds the ${kMaxMib} MiB the device runner can carry" >&2
  exit 1
fi

rm -rf "$dest"
mv "$staging" "$dest"
trap - EXIT
[ "$missing_deps" -eq 0 ] || echo "fetch-gpu-debs: see the warnings above about dependencies" >&2
echo "fetch-gpu-debs: ready; carry '.gpu-debs/debs' with the tree and run: bash tools/gpu-check.sh"
