# bench/gpu/env.sh - sourced by bench/gpu/run.sh and bench/gpu/scaling.sh: puts nvcc, meson,
# ninja, the .deb packages carried in .debs/ and any cuBLAS / NCCL from pip wheels where the build
# and the programs find them (PATH, PKG_CONFIG_*, CPATH, LIBRARY_PATH, LD_LIBRARY_PATH), and sets
# the array meson=(...). Safe to source twice. Returns non-zero, with a message, when a tool is
# missing.
ct_env_fail() { echo "env.sh: $*" >&2; return 1; }
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
    export PATH="$PATH:/usr/local/cuda/bin"
fi
command -v nvcc >/dev/null || { ct_env_fail "nvcc not found (PATH, /usr/local/cuda/bin)"; return 1; }
meson=(meson)
if ! command -v meson >/dev/null; then
    python3 -c 'import mesonbuild' 2>/dev/null || { ct_env_fail "meson not found (neither on PATH nor as python3's mesonbuild)"; return 1; }
    meson=(python3 -m mesonbuild.mesonmain)
fi
command -v ninja >/dev/null || python3 -c 'import ninja' 2>/dev/null || { ct_env_fail "ninja not found"; return 1; }
if ! command -v ninja >/dev/null; then
    PATH="$PATH:$(python3 -c 'import ninja, os; print(os.path.join(os.path.dirname(ninja.__file__), "data", "bin"))')"
    export PATH
fi
if [ -d .debs ] && ls .debs/*.deb >/dev/null 2>&1; then
    # Debian's packages unpacked under one prefix and used only from there: pkg-config reads
    # only their .pc files (PKG_CONFIG_LIBDIR) and prefixes their paths (PKG_CONFIG_SYSROOT_DIR);
    # links that point at an absolute path (libz.so -> /lib/...) are re-pointed into the prefix.
    prefix=/tmp/ct-debs
    mkdir -p "$prefix"
    for d in .debs/*.deb; do dpkg -x "$d" "$prefix" || { ct_env_fail "unpacking $d"; return 1; }; done
    find "$prefix" -type l | while read -r l; do
        t=$(readlink "$l")
        case $t in /*) [ -e "$prefix$t" ] && ln -sfn "$prefix$t" "$l" ;; esac
    done
    pc=$(find "$prefix" -type d -name pkgconfig | tr '\n' ':')
    libs=$(find "$prefix" -name 'lib*.so*' -printf '%h\n' | sort -u | tr '\n' ':')
    incs=$(find "$prefix" -type d -name include | tr '\n' ':')
    export PKG_CONFIG_LIBDIR="${pc%:}" PKG_CONFIG_SYSROOT_DIR="$prefix"
    export LIBRARY_PATH="${libs}${LIBRARY_PATH:-}" LD_LIBRARY_PATH="${libs}${LD_LIBRARY_PATH:-}"
    export CPATH="${incs}${CPATH:-}"
    if [ -x "$prefix/usr/bin/pkgconf" ]; then
        export PKG_CONFIG="$prefix/usr/bin/pkgconf" PATH="$prefix/usr/bin:$PATH"
    fi
    echo "# unpacked $(find .debs -maxdepth 1 -name '*.deb' | wc -l) .deb files from .debs/ under $prefix"
fi

# cuBLAS and NCCL: meson looks for them beside nvcc (<cuda>/lib64, <cuda>/include). Where the
# toolkit lacks one and a pip wheel (nvidia-cublas, nvidia-nccl-cu13) has it, link its files into
# /tmp/ct-cudalibs (lib<x>.so -> lib<x>.so.N; the wheels ship no unversioned names) and point the
# compiler, linker and loader there.
cuda_root=$(dirname "$(dirname "$(command -v nvcc)")")
extra=/tmp/ct-cudalibs
for lib in cublas cublasLt nccl; do
    [ -e "$cuda_root/lib64/lib$lib.so" ] && continue
    found=$(find / -xdev \( -path /proc -o -path "$extra" \) -prune -o -name "lib$lib.so*" -type f -print 2>/dev/null | head -n 1)
    [ -n "$found" ] || continue
    mkdir -p "$extra/lib" "$extra/include"
    ln -sfn "$found" "$extra/lib/lib$lib.so"
    ln -sfn "$found" "$extra/lib/$(basename "$found")"
    if [ "$lib" = nccl ] && [ ! -e "$cuda_root/include/nccl.h" ]; then
        h=$(find "$(dirname "$(dirname "$found")")" / -xdev -name nccl.h -print 2>/dev/null | head -n 1)
        [ -n "$h" ] && ln -sfn "$h" "$extra/include/nccl.h"
    fi
    echo "# $lib from $found"
done
if [ -d "$extra/lib" ]; then
    export LIBRARY_PATH="$extra/lib:${LIBRARY_PATH:-}" LD_LIBRARY_PATH="$extra/lib:${LD_LIBRARY_PATH:-}"
    export CPATH="$extra/include:${CPATH:-}"
fi

