#!/usr/bin/env bash
# Rehearses tools/gpu-check.sh on a Debian 12 machine that has torchfarm's packages installed, and
# proves the build needs only the unpacked .debs: in a private mount namespace (unshare -m, root)
# the system's copies of what the .debs hold are hidden (empty directories and /dev/null mounted
# over them), then `GPU_CHECK_REHEARSE=1 tools/gpu-check.sh` runs there. Nothing changes outside
# the namespace, and everything is visible again when it ends.
#
#   bash tools/gpu-check-rehearse.sh [--keep-objects]      # as root; env passes through
#
# Hidden: every header directory or file, CMake package folder, .pc file, link-time .so and .a
# of the .debs; pkg-config itself (so the prefix's pkgconf wrapper is used); and the runtime
# libraries of ZeroMQ, prometheus-cpp, civetweb and pkgconf (so LD_LIBRARY_PATH must supply them
# from the prefix). Not hidden: runtime libraries the machine's own tools load (libsystemd0,
# libssl3, krb5, zlib...). --keep-objects reuses build-gpu-rehearse's object files: its
# CMakeCache.txt and bin/ are removed, so CMake configures from scratch and every program is
# linked again, but nothing is recompiled (the compile commands are unchanged).
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
debs_dir="$(realpath -m "${GPU_CHECK_DEBS:-$repo_root/.gpu-debs/debs}")"
build_dir="$(realpath -m "${GPU_CHECK_BUILD_DIR:-$repo_root/build-gpu-rehearse}")"
readonly multiarch=x86_64-linux-gnu
# Runtime packages whose libraries are hidden too: nothing outside torchfarm loads them.
hidden_runtime_packages=" libzmq5 libsodium23 libpgm-5.3-0 libnorm1 libprometheus-cpp-core1.0"
hidden_runtime_packages+=" libprometheus-cpp-pull1.0 libprometheus-cpp-push1.0 libcivetweb1 libpkgconf3 "
readonly hidden_runtime_packages

if [ "$(id -u)" != 0 ]; then echo "gpu-check-rehearse: needs root (mount namespaces)" >&2; exit 1; fi
if [ "${1:-}" != --inside ]; then
  exec unshare -m --propagation private bash "$0" --inside "$@"
fi
shift
keep_objects=0
[ "${1:-}" = --keep-objects ] && keep_objects=1

# The path to hide for one file of a package: its top folder where a whole folder belongs to
# the package (usr/include/boost, usr/share/cmake/cppzmq), the file itself otherwise; nothing for
# docs, sources and plugin folders.
hide_target() {
  local path="$1" package="$2" lib="usr/lib/$multiarch" name='[^/]+'
  if [[ "$path" =~ ^(usr/include/$multiarch/$name)(/|$) ]]; then echo "${BASH_REMATCH[1]}"
  elif [[ "$path" =~ ^usr/include/$multiarch$ ]]; then :  # glibc's headers live there too
  elif [[ "$path" =~ ^(usr/include/$name)(/|$) ]]; then echo "${BASH_REMATCH[1]}"
  elif [[ "$path" =~ ^(usr/share/cmake/$name)/ || "$path" =~ ^($lib/cmake/$name)/ ]]; then
    echo "${BASH_REMATCH[1]}"
  elif [[ "$path" =~ ^$lib/cmake/$name\.cmake$ ]]; then echo "$path"
  elif [[ "$path" =~ ^($lib|usr/share)/pkgconfig/$name\.pc$ ]]; then echo "$path"
  elif [[ "$path" =~ ^$lib/$name\.(so|a)$ ]]; then echo "$path"
  elif [[ "$path" =~ ^(usr/)?lib/$multiarch/$name\.so\. ]]; then
    [[ "$hidden_runtime_packages" == *" $package "* ]] && echo "$path"
  fi
  return 0
}

targets_file="$(mktemp)"
for deb in "$debs_dir"/*.deb; do
  package="$(dpkg-deb -f "$deb" Package)"
  dpkg-deb --fsys-tarfile "$deb" | tar -t | sed 's|^\./||; s|/$||' | while read -r path; do
    [ -n "$path" ] && hide_target "$path" "$package"
  done
done | sort -u >"$targets_file"
printf '%s\n' usr/bin/pkg-config usr/bin/pkgconf "usr/bin/$multiarch-pkg-config" >>"$targets_file"

empty_dir="$(mktemp -d)"
hidden=0
skipped=()
while read -r path; do
  target="/$path"
  [ -e "$target" ] || continue
  # A mount over a symlink lands on its target: hide a link only when its target is hidden too
  # (libzmq.so, not libz.so, whose target every program on the machine loads).
  if [ -L "$target" ] && ! grep -qxF "$(realpath --relative-to=/ "$target")" "$targets_file"; then
    skipped+=("$path")
    continue
  fi
  if [ -d "$target" ]; then mount --bind "$empty_dir" "$target"
  else mount --bind /dev/null "$target"
  fi
  hidden=$((hidden + 1))
done <"$targets_file"
echo "gpu-check-rehearse: hid $hidden system paths (of $(wc -l <"$targets_file") the .debs provide)"
echo "gpu-check-rehearse: left visible (links to libraries the machine runs on): ${skipped[*]}"
for probe in /usr/include/zmq.hpp /usr/include/boost/version.hpp /usr/include/nlohmann/json.hpp \
             /usr/share/cmake/cppzmq/cppzmqConfig.cmake /usr/lib/$multiarch/libzmq.so.5; do
  if [ -s "$probe" ]; then echo "gpu-check-rehearse: $probe is still visible" >&2; exit 1; fi
done
if pkg-config --version >/dev/null 2>&1; then echo "gpu-check-rehearse: pkg-config still runs" >&2; exit 1; fi
echo "gpu-check-rehearse: zmq.hpp, boost, nlohmann, cppzmq's CMake files, libzmq.so.5, pkg-config: hidden"

if [ "$keep_objects" = 1 ]; then
  rm -rf "${build_dir:?}/CMakeCache.txt" "${build_dir:?}/CMakeFiles/"*.cmake "${build_dir:?}/bin"
  echo "gpu-check-rehearse: reusing the objects in $build_dir; configuring and linking again"
fi
cd "$repo_root"
GPU_CHECK_REHEARSE=1 GPU_CHECK_BUILD_DIR="$build_dir" exec bash tools/gpu-check.sh
