# shellcheck shell=bash disable=SC2154  # prefix, multiarch, work: globals of tools/gpu-check.sh
# The private prefix of tools/gpu-check.sh (sourced by it, not run): Debian .debs unpacked into a
# folder instead of /, made usable from there, and the choice of which of its shared libraries the
# built programs load. Uses gpu-check.sh's globals: prefix, multiarch, work, and its log().
#
#   unpack_debs METHOD DEB...        dpkg | ar | python; prints what failed and returns 1
#   link_runtime_libs DIR MODE BIN...  symlinks into DIR the prefix libraries BIN... need
#
# What a prefix needs beyond the files: pkg-config files name /usr (pkg-config strips only system
# folders, so a -I/usr/include would be dropped and the machine's own headers used); a few dev
# symlinks are absolute (libz.so -> /lib/...); and Debian's pkgconf needs its library.

# One .deb's data.tar into the prefix: dpkg-deb, or ar + tar, or Python alone (a machine without
# dpkg or binutils still has the Python its PyTorch runs on).
unpack_one() {  # unpack_one DEB METHOD
  local deb="$1" method="$2" tmp rc
  case "$method" in
    dpkg) dpkg-deb -x "$deb" "$prefix" ;;
    ar)
      tmp="$(mktemp -d "$work/ar.XXXXXX")"
      (cd "$tmp" && ar x "$deb") && tar -xf "$tmp"/data.tar.* -C "$prefix"
      rc=$?
      rm -rf "$tmp"
      return "$rc"
      ;;
    python)
      python3 - "$deb" "$prefix" <<'PY'
import io, sys, tarfile
deb, dest = sys.argv[1], sys.argv[2]
with open(deb, "rb") as f:
    if f.read(8) != b"!<arch>\n":
        sys.exit(f"{deb}: not an ar archive")
    while True:
        header = f.read(60)
        if len(header) < 60:
            sys.exit(f"{deb}: no data.tar member")
        name, size = header[:16].decode().strip().rstrip("/"), int(header[48:58].decode())
        data = f.read(size + (size % 2))[:size]
        if name.startswith("data.tar"):
            with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as tar:
                if hasattr(tarfile, "fully_trusted_filter"):
                    tar.extractall(dest, filter="fully_trusted")  # absolute symlinks stay
                else:
                    tar.extractall(dest)
            break
PY
      ;;
    *) return 2 ;;
  esac
}

unpack_debs() {  # unpack_debs METHOD DEB...: a fresh prefix
  local method="$1" deb link target
  shift
  rm -rf "$prefix"
  mkdir -p "$prefix"
  for deb in "$@"; do
    unpack_one "$deb" "$method" || { echo "unpacking $(basename "$deb") with $method failed"; return 1; }
  done
  # Absolute symlinks (libz.so -> /lib/...) point into the prefix instead.
  while IFS= read -r link; do
    target="$(readlink "$link")"
    if [ -e "$prefix$target" ]; then ln -sfn "$prefix$target" "$link"
    else log "warning: $link -> $target, which the prefix lacks" >&2
    fi
  done < <(find "$prefix" -type l -lname '/*')
  # pkg-config files name /usr; make them name the prefix.
  find "$prefix" -name '*.pc' -print0 \
    | xargs -0 -r sed -i -E "s#(^[a-z_]+=|[=\" ]|-I|-L)/usr([/\" ]|\$)#\\1$prefix/usr\\2#g"
  # A pkg-config for machines without one: Debian's pkgconf with its library beside it.
  mkdir -p "$prefix/bin"
  cat >"$prefix/bin/pkg-config" <<EOF
#!/bin/sh
LD_LIBRARY_PATH="$prefix/usr/lib/$multiarch\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" exec "$prefix/usr/bin/pkgconf" "\$@"
EOF
  chmod +x "$prefix/bin/pkg-config"
}

# MODE missing: only the libraries ldd cannot resolve on this machine (absent, too old for a
# symbol version, or unloadable), asked again until nothing changes, since each one added may
# need others; the machine's own copies win everywhere else. MODE all: every prefix library but
# libstdc++ and libgcc_s. Without ldd, all.
link_runtime_libs() {  # link_runtime_libs DIR MODE BINARY...
  local runtime_dir="$1" mode="$2" dir lib missing added name
  shift 2
  local lib_dirs=("$prefix/usr/lib/$multiarch" "$prefix/lib/$multiarch")
  rm -rf "$runtime_dir"
  mkdir -p "$runtime_dir"
  command -v ldd >/dev/null || { log "no ldd: every prefix library goes on LD_LIBRARY_PATH"; mode=all; }
  if [ "$mode" = all ]; then
    for dir in "${lib_dirs[@]}"; do
      for lib in "$dir"/lib*.so.*; do
        case "$(basename "$lib")" in libstdc++*|libgcc_s*) continue ;; esac
        [ -e "$lib" ] && ln -sf "$lib" "$runtime_dir/"
      done
    done
    return 0
  fi
  for _ in 1 2 3 4 5 6; do
    missing="$(for b in "$@"; do
        [ -x "$b" ] && [ -f "$b" ] && LD_LIBRARY_PATH="$runtime_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ldd "$b" 2>&1
      done | sed -nE \
        -e 's/^[[:space:]]*([^[:space:]]+) => not found.*/\1/p' \
        -e "s/.*: ([^: ]+): version \`[^']+' not found.*/\\1/p" \
        -e 's/.*error while loading shared libraries: ([^:]+):.*/\1/p' | sort -u)"
    added=0
    for name in $missing; do
      name="$(basename "$name")"
      [ -e "$runtime_dir/$name" ] && continue
      for dir in "${lib_dirs[@]}"; do
        if [ -e "$dir/$name" ]; then ln -sf "$dir/$name" "$runtime_dir/$name"; added=1; break; fi
      done
    done
    [ "$added" = 1 ] || break
  done
  if [ -n "$missing" ]; then log "WARNING: unresolved, and not in the prefix: $(tr '\n' ' ' <<<"$missing")"; fi
}
