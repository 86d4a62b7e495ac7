#!/usr/bin/env bash
# Build a oneDNN whose matmul takes bf16 on ANY x86-64 CPU, to test titan's oneDNN bf16 engine
# (src/ops/cpu/bf16.c) on a machine without bf16 units. Not part of the install: a developer's
# test tool (docs/testing.md, "The oneDNN bf16 engine without bf16 units").
#
# Debian's oneDNN 2.6.3 refuses every bf16 matmul below AVX-512 (platform::has_data_type_support
# is false, so even the reference kernel is unimplemented), so on such a CPU titan's onednn
# engine never runs and its strides, transposes, sum post-op, bf16 weight copies and the
# FSDP / TP / EP paths through it are untested. This builds the same oneDNN version with:
#   - bf16 declared supported (platform.cpp), so its reference matmul (ref:any) takes bf16
#     operands with fp32 accumulation: the same API calls, primitive descriptors, memory
#     descriptors and post-ops titan makes on an AMX machine, only a slow kernel behind them;
#   - the gemm-based bf16 matmul disabled (its GEMM needs AVX-512 and would fail at execute);
#   - DNNL_TARGET_ARCH=ARCH_GENERIC (no JIT) and only the matmul primitive's sources (a few
#     minutes on 2 cores instead of an hour).
# Never link a production titan against it: its matmuls are ~100x slower than the real ones.
#
# usage: scripts/onednn_ref.sh ONEDNN_SRC PREFIX [BUILD_DIR]
#   ONEDNN_SRC  a oneDNN v2.6.3 source tree (git clone -b v2.6.3 https://github.com/oneapi-src/oneDNN),
#               left unmodified: the edits go to a copy
#   PREFIX      where to install (PREFIX/lib/libdnnl.so, PREFIX/include)
# then:
#   cmake -S . -B build-dnnlref -DCMAKE_BUILD_TYPE=Release -DTITAN_DNNL=PREFIX/lib/libdnnl.so \
#         -DTITAN_DNNL_INCLUDE=PREFIX/include && cmake --build build-dnnlref -j
#   (cd build-dnnlref && ctest -R bf16_engine --output-on-failure)   # runs instead of skipping
set -euo pipefail
[ $# -ge 2 ] || { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2; }
src=$(cd "$1" && pwd); prefix=$2; work=${3:-$(mktemp -d /tmp/onednn-ref.XXXXXX)}
ver=$(sed -n 's/^set(PROJECT_VERSION "\([0-9.]*\)")/\1/p' "$src/CMakeLists.txt")
[ "$ver" = 2.6.3 ] || { echo "$src: oneDNN version '$ver', expected 2.6.3 (the API titan uses)" >&2; exit 1; }
mkdir -p "$work"
rm -rf "$work/src"
cp -a "$src" "$work/src"
s=$work/src
edit() { # file, sed expression, what must appear afterwards: each edit is checked, not assumed
  sed -i "$2" "$s/$1"
  grep -q "$3" "$s/$1" || { echo "$1: edit did not apply (oneDNN source not as expected)" >&2; exit 1; }
}
edit src/cpu/platform.cpp \
  '/case data_type::bf16:/,/case data_type::f16/ s/return x64::mayiuse(x64::avx512_core);/return true; \/\* titan onednn_ref \*\//' \
  'return true; /\* titan onednn_ref'
edit src/cpu/platform.cpp \
  '/case data_type::bf16:/,/case data_type::f16/ s/^\( *\)return false;/\1return true; \/\* titan onednn_ref (generic) \*\//' \
  'titan onednn_ref (generic)'
edit src/cpu/matmul/gemm_bf16_matmul.cpp \
  's/platform::has_data_type_support(data_type::bf16)/false \/\* titan onednn_ref \*\//' \
  'false /\* titan onednn_ref'
# only the matmul primitive's implementations, plus the (then empty) lists of the others
python3 - "$s/src/cpu/CMakeLists.txt" <<'EOF'
import sys
p = sys.argv[1]
s = open(p).read()
anchor = 'if((DNNL_TARGET_ARCH STREQUAL "X64") OR (DNNL_TARGET_ARCH STREQUAL "AARCH64"))\n    file(GLOB_RECURSE SOURCES_JIT_UTILS'
if anchor not in s:
    sys.exit(p + ": no anchor for the source filter (oneDNN source not as expected)")
keep = '''# titan onednn_ref: only what the matmul primitive needs
set(TITAN_KEEP ${SOURCES})
list(FILTER TITAN_KEEP INCLUDE REGEX "/cpu_[a-z_]*_list\\\\.cpp$|gemm_inner_product_utils")
list(FILTER SOURCES EXCLUDE REGEX "/rnn/|convolution|pooling|normalization|lrn|eltwise|softmax|resampling|shuffle|prelu|reduction|ref_binary|inner_product|deconvolution|ref_fused|ref_sum|ref_concat|simple_concat|simple_sum")
list(APPEND SOURCES ${TITAN_KEEP})
'''
open(p, 'w').write(s.replace(anchor, keep + anchor, 1))
EOF
launcher=()
command -v ccache > /dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
cmake -S "$s" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DDNNL_TARGET_ARCH=ARCH_GENERIC \
  -DDNNL_ENABLE_PRIMITIVE=MATMUL -DDNNL_BUILD_TESTS=OFF -DDNNL_BUILD_EXAMPLES=OFF \
  -DDNNL_CPU_RUNTIME=OMP -DCMAKE_INSTALL_PREFIX="$prefix" "${launcher[@]}" > "$work/cmake.log"
cmake --build "$work/build" -j"$(nproc)" > "$work/build.log"
cmake --install "$work/build" > /dev/null
echo "installed the reference-bf16 oneDNN $ver in $prefix (build in $work)"
