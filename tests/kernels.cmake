# Kernel plugins: the shipped example (examples/kernels/rope_bhsd.c, built into
# build/examples/) and the test plugins of tests/plugins/test_plugin.c, one per case; then
# the plugin/override unit test and the conformance runs of `titan kernels test`.
add_library(rope_bhsd MODULE ${CMAKE_SOURCE_DIR}/examples/kernels/rope_bhsd.c)
set_target_properties(rope_bhsd PROPERTIES PREFIX "lib"
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/examples)
target_include_directories(rope_bhsd PRIVATE ${CMAKE_SOURCE_DIR}/include)
target_link_libraries(rope_bhsd PRIVATE OpenMP::OpenMP_C)

add_library(grouped_tiles MODULE ${CMAKE_SOURCE_DIR}/examples/kernels/grouped_tiles.c)
set_target_properties(grouped_tiles PROPERTIES PREFIX "lib"
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/examples)
target_include_directories(grouped_tiles PRIVATE ${CMAKE_SOURCE_DIR}/include)
target_compile_options(grouped_tiles PRIVATE -ffp-contract=fast)
target_link_libraries(grouped_tiles PRIVATE OpenMP::OpenMP_C)

set(TITAN_TEST_PLUGIN_DIR ${CMAKE_BINARY_DIR}/tests/plugins)
foreach(case good version nosym noinit badop nobwd initfail dup badlayout marker v1 v1moe badflags accum
        silentcheck badsize nofwd nan fail noacc rankfail qwen tile32 unwritten oob oobws)
  add_library(test_plugin_${case} MODULE ${CMAKE_CURRENT_SOURCE_DIR}/plugins/test_plugin.c)
  set_target_properties(test_plugin_${case} PROPERTIES PREFIX "lib"
    LIBRARY_OUTPUT_DIRECTORY ${TITAN_TEST_PLUGIN_DIR})
  target_compile_definitions(test_plugin_${case} PRIVATE PLUGIN_CASE_${case})
  target_include_directories(test_plugin_${case} PRIVATE ${CMAKE_SOURCE_DIR}/include)
  target_link_libraries(test_plugin_${case} PRIVATE m)
  add_dependencies(test_kernels test_plugin_${case})
endforeach()
add_dependencies(test_kernels rope_bhsd grouped_tiles)
target_compile_definitions(test_kernels PRIVATE
  TITAN_TEST_PLUGIN_DIR="${TITAN_TEST_PLUGIN_DIR}"
  TITAN_EXAMPLE_PLUGIN="${CMAKE_BINARY_DIR}/examples/librope_bhsd.so"
  TITAN_MOE_PLUGIN="${CMAKE_BINARY_DIR}/examples/libgrouped_tiles.so")

# Conformance: every registered implementation against its op's default (defaults against
# the reference implementations), then the example plugin and the test plugin.
add_test(NAME kernels_conformance COMMAND titan kernels test)
add_test(NAME kernels_conformance_plugin COMMAND titan kernels test rope_bhsd
  --plugin ${CMAKE_BINARY_DIR}/examples/librope_bhsd.so)
add_test(NAME kernels_conformance_moe_plugin COMMAND titan kernels test grouped_tiles --shapes 12
  --plugin ${CMAKE_BINARY_DIR}/examples/libgrouped_tiles.so)
add_test(NAME kernels_conformance_plugin_ws COMMAND titan kernels test swiglu_ws
  --plugin ${TITAN_TEST_PLUGIN_DIR}/libtest_plugin_good.so)
# a plugin's check that refuses without a reason: the message names the plugin file
add_test(NAME kernels_plugin_silent_check COMMAND titan kernels test swiglu_ws
  --plugin ${TITAN_TEST_PLUGIN_DIR}/libtest_plugin_silentcheck.so)
set_tests_properties(kernels_plugin_silent_check PROPERTIES
  PASS_REGULAR_EXPRESSION "refused this shape\\).*libtest_plugin_silentcheck.so|libtest_plugin_silentcheck.so.*refused this shape")
# a kernel constrained to real Qwen3 shapes (head_dim 128, GQA ratio 8, dim % 512 == 0), which
# no small random shape meets: checked on model-like shapes instead of failing unchecked
add_test(NAME kernels_conformance_plugin_qwen COMMAND titan kernels test swiglu_qwen
  --plugin ${TITAN_TEST_PLUGIN_DIR}/libtest_plugin_qwen.so)
set_tests_properties(kernels_conformance_plugin_qwen PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=2"
  TIMEOUT 120)
# a kernel returning an error code stops titan (abort: the op signatures return void) naming
# kernel, plugin, layer and direction; sh reports the signal, which ctest would call a crash
add_test(NAME kernels_plugin_error_code COMMAND sh -c "\"$@\" 2>&1; echo \"exit $?\"" sh
  $<TARGET_FILE:titan> kernels test swiglu_fail --plugin ${TITAN_TEST_PLUGIN_DIR}/libtest_plugin_fail.so)
set_tests_properties(kernels_plugin_error_code PROPERTIES PASS_REGULAR_EXPRESSION
  "kernel swiglu/swiglu_fail \\(plugin [^)]*libtest_plugin_fail.so\\) at conformance: forward returned 3.*exit 134")
# a backward that leaves an element unwritten fails conformance every time (its outputs start
# as NaN; it had compared whatever an earlier call left in the arena, and passed by chance);
# a forward writing one float past its output stops, naming kernel, plugin and output
add_test(NAME kernels_plugin_unwritten COMMAND titan kernels test swiglu_unwritten
  --plugin ${TITAN_TEST_PLUGIN_DIR}/libtest_plugin_unwritten.so)
set_tests_properties(kernels_plugin_unwritten PROPERTIES PASS_REGULAR_EXPRESSION
  "FAIL swiglu/swiglu_unwritten vs default .*err (nan|inf)")
add_test(NAME kernels_plugin_out_of_bounds COMMAND sh -c "\"$@\" 2>&1; echo \"exit $?\"" sh
  $<TARGET_FILE:titan> kernels test swiglu_oob --plugin ${TITAN_TEST_PLUGIN_DIR}/libtest_plugin_oob.so)
set_tests_properties(kernels_plugin_out_of_bounds PROPERTIES PASS_REGULAR_EXPRESSION
  "FAIL swiglu/swiglu_oob at .*kernel swiglu/swiglu_oob \\(plugin [^)]*libtest_plugin_oob.so\\) at conformance: its forward wrote into the 1024 bytes after output 0.*exit 1([^0-9]|$)")
add_test(NAME kernels_plugin_workspace_overrun COMMAND sh -c "\"$@\" 2>&1; echo \"exit $?\"" sh
  $<TARGET_FILE:titan> kernels test swiglu_oobws --plugin ${TITAN_TEST_PLUGIN_DIR}/libtest_plugin_oobws.so)
set_tests_properties(kernels_plugin_workspace_overrun PROPERTIES PASS_REGULAR_EXPRESSION
  "FAIL swiglu/swiglu_oobws at .*its forward wrote into the 1024 bytes after its workspace.*exit 1([^0-9]|$)")
# in training the same write stops the run (abort: the op signatures return void), naming it
add_test(NAME train_plugin_out_of_bounds COMMAND sh -c "\"$@\" 2>&1; echo \"exit $?\"" sh
  $<TARGET_FILE:titan> train --set n_layers=1 --set dim=64 --set n_heads=4 --set n_kv_heads=2
  --set head_dim=16 --set ffn_dim=128 --set vocab_size=300 --random-tokens --batch 1 --seq-len 8
  --steps 1 --peak-tflops 1 --dump-folder ${CMAKE_BINARY_DIR}/train_plugin_oob
  --kernels.plugins "[\"${TITAN_TEST_PLUGIN_DIR}/libtest_plugin_oob.so\"]"
  --kernels.overrides "[\"swiglu=swiglu_oob\"]")
set_tests_properties(train_plugin_out_of_bounds PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=2"
  PASS_REGULAR_EXPRESSION "kernel swiglu/swiglu_oob \\(plugin [^)]*\\) at layers.0[^:]*: its forward wrote into the 1024 bytes after output 0.*exit 134")
# the same error in a training run at step 4: named, metrics.jsonl and the report page final
add_test(NAME train_plugin_error COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/scripts/plugin_error_train.sh
  $<TARGET_FILE:titan> ${TITAN_TEST_PLUGIN_DIR})
set_tests_properties(train_plugin_error PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=2")
add_test(NAME kernels_conformance_plugin_norm COMMAND titan kernels test add_rmsnorm_plain
  --plugin ${TITAN_TEST_PLUGIN_DIR}/libtest_plugin_good.so)
# The same conformance run on the baseline (non-AVX-512) kernel copies, forced through the
# dispatcher (src/ops/cpu/dispatch.c): the fallback must meet the same tolerances.
add_test(NAME kernels_conformance_isa_default COMMAND titan kernels test)
set_tests_properties(kernels_conformance_isa_default PROPERTIES
  ENVIRONMENT "OMP_NUM_THREADS=2;TITAN_ISA=default" TIMEOUT 300
  PASS_REGULAR_EXPRESSION "CPU kernels ISA: default"
  # a pass regex alone ignores the exit code: a failed implementation must still fail the test
  FAIL_REGULAR_EXPRESSION "FAIL|failed")
# attention/bf16 and lmhead_ce/bf16 in their AMX layouts (src/ops/cpu/cpu.h
# ops_cpu_bf16_amx_layouts: dense head-major attention, the transposed lm_head chunk), which
# kernels_conformance sees only where they are the default (attention's, with AMX): each turned
# on, on any CPU whose bf16 engine is onednn (where it is emulated neither layout is used and
# these pass as kernels_conformance does).
foreach(op attention lmhead_ce)
  add_test(NAME kernels_conformance_amx_layouts_${op} COMMAND titan kernels test ${op})
  set_tests_properties(kernels_conformance_amx_layouts_${op} PROPERTIES
    ENVIRONMENT "OMP_NUM_THREADS=2;TITAN_AMX_LAYOUTS=${op};TITAN_AMX_LMHEAD_CE=0" TIMEOUT 300)
endforeach()
# lmhead_ce/bf16's logit gradient against exact rounding (tests/unit/test_lmhead_rounding.c:
# fused on AMX tiles where the CPU has AMX-BF16, else chunked) in the chunked row layout and the
# column layout too (a drifting float sum of the exps fails it)
add_test(NAME test_lmhead_rounding_chunked COMMAND test_lmhead_rounding)
set_tests_properties(test_lmhead_rounding_chunked PROPERTIES
  ENVIRONMENT "OMP_NUM_THREADS=2;TITAN_AMX_LMHEAD_CE=0" TIMEOUT 600)
add_test(NAME test_lmhead_rounding_amx_layouts COMMAND test_lmhead_rounding)
set_tests_properties(test_lmhead_rounding_amx_layouts PROPERTIES
  ENVIRONMENT "OMP_NUM_THREADS=2;TITAN_AMX_LAYOUTS=lmhead_ce;TITAN_AMX_LMHEAD_CE=0" TIMEOUT 600)
# Unoptimised (Debug, the sanitizer build's -O0), the row path's `omp simd` float sums of the
# exps are not vectorised: one sequential sum per 1024 values, the drift this test catches
# (975 of 9.7M values high, measured). Its bound holds for the optimised build users run; the
# row path's grouping is the compiler's there, not the code's (docs/kernels.md).
if(TITAN_SANITIZE OR CMAKE_BUILD_TYPE STREQUAL "Debug")
  set_tests_properties(test_lmhead_rounding test_lmhead_rounding_chunked
    test_lmhead_rounding_amx_layouts PROPERTIES
    DISABLED TRUE)
endif()
# layouts off: on a CPU with AMX attention's default layout is the dense one, so the strided
# products it replaced are checked here
add_test(NAME kernels_conformance_amx_layouts_none COMMAND titan kernels test attention)
set_tests_properties(kernels_conformance_amx_layouts_none PROPERTIES
  ENVIRONMENT "OMP_NUM_THREADS=2;TITAN_AMX_LAYOUTS=0" TIMEOUT 300
  PASS_REGULAR_EXPRESSION "AMX layouts: none" FAIL_REGULAR_EXPRESSION "FAIL|failed")
# the default: attention's layout where /proc/cpuinfo lists amx_bf16 or avx512_bf16 and the
# engine is onednn
add_test(NAME kernels_amx_layouts_default COMMAND bash -c "out=$($<TARGET_FILE:titan> kernels test attention 2>&1) || exit 1
    case \"$out\" in *'bf16 engine: emulated'*) want=none ;; *)
      grep -qwE 'amx_bf16|avx512_bf16' /proc/cpuinfo && want=attention || want=none ;; esac
    echo \"$out\" | grep -q \"AMX layouts: $want;\" || { echo \"FAIL: want AMX layouts $want\"; echo \"$out\"; exit 1; }
    echo \"ok: AMX layouts $want\"")
set_tests_properties(kernels_amx_layouts_default PROPERTIES
  ENVIRONMENT "OMP_NUM_THREADS=2" TIMEOUT 300)
# a value other than 0, 1 or a list of the layouts' names is said, not ignored in silence (the layouts stay off)
add_test(NAME kernels_amx_layouts_bad_value COMMAND titan kernels test attention)
set_tests_properties(kernels_amx_layouts_bad_value PROPERTIES
  ENVIRONMENT "OMP_NUM_THREADS=2;TITAN_AMX_LAYOUTS=yes"
  PASS_REGULAR_EXPRESSION "TITAN_AMX_LAYOUTS=yes: not 0, 1 or a list of attention, lmhead_ce. the AMX layouts stay off"
  FAIL_REGULAR_EXPRESSION "FAIL|failed")
# titan's own AMX GEMM (src/ops/cpu/amx_gemm.c) against double sums, edges and all
# (tests/unit/test_amx_gemm.c; skipped without AMX-BF16), then every op's bf16 path with all of
# its products on it (the default gives it only the fp32-result products outside parallel
# regions), its default against /proc/cpuinfo, and a bad TITAN_AMX_GEMM said
set_tests_properties(test_amx_gemm PROPERTIES SKIP_RETURN_CODE 77)
# the emulated AMX tiles (a build with -DTITAN_AMX_EMULATE=ON, src/ops/cpu/amx_emulate.c) against
# the SDM's definitions of the instructions (test_amx_emulate.c; skipped in other builds)
set_tests_properties(test_amx_emulate PROPERTIES SKIP_RETURN_CODE 77)
if(TITAN_AMX_EMULATE)
  target_compile_definitions(test_amx_emulate PRIVATE TITAN_AMX_EMULATE)
endif()
# lmhead_ce fused on AMX tiles against the loss and gradients in double (test_amx_lmhead_ce.c;
# skipped without AMX-BF16)
set_tests_properties(test_amx_lmhead_ce PROPERTIES SKIP_RETURN_CODE 77 ENVIRONMENT "OMP_NUM_THREADS=2")
# (where the CPU has AMX the kernel must really run: a kernel failing its self-check would
# leave every product to oneDNN and pass conformance unseen)
add_test(NAME kernels_conformance_amx_gemm COMMAND bash -c "out=$($<TARGET_FILE:titan> kernels test 2>&1) || { echo \"$out\"; exit 1; }
    echo \"$out\"
    case \"$out\" in *'bf16 engine: emulated'*) exit 0 ;; esac
    grep -qw amx_bf16 /proc/cpuinfo || exit 0
    echo \"$out\" | grep -q \"titan's AMX GEMM: all products;\" || { echo 'FAIL: titan AMX GEMM not in use'; exit 1; }")
set_tests_properties(kernels_conformance_amx_gemm PROPERTIES
  ENVIRONMENT "OMP_NUM_THREADS=2;TITAN_AMX_GEMM=1" TIMEOUT 300)
add_test(NAME kernels_amx_gemm_default COMMAND bash -c "out=$($<TARGET_FILE:titan> kernels test embedding 2>&1) || exit 1
    case \"$out\" in *'bf16 engine: emulated'*) want=none ;; *)
      grep -qw amx_bf16 /proc/cpuinfo && want='fp32-result products' || want=none ;; esac
    echo \"$out\" | grep -q \"titan's AMX GEMM: $want;\" || { echo \"FAIL: want titan's AMX GEMM: $want\"; echo \"$out\"; exit 1; }
    echo \"ok: titan's AMX GEMM: $want\"")
set_tests_properties(kernels_amx_gemm_default PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=2" TIMEOUT 300)
# lmhead_ce fused on AMX tiles: the default where the CPU has AMX-BF16 (and the kernels are on),
# off with TITAN_AMX_LMHEAD_CE=0 or TITAN_AMX_GEMM=0, a bad value said
add_test(NAME kernels_amx_lmhead_ce_default COMMAND bash -c "out=$($<TARGET_FILE:titan> kernels test embedding 2>&1) || exit 1
    case \"$out\" in *'bf16 engine: emulated'*) want='chunked logits' ;; *)
      grep -qw amx_bf16 /proc/cpuinfo && want='fused on AMX tiles' || want='chunked logits' ;; esac
    echo \"$out\" | grep -q \"lm_head + CE: $want;\" || { echo \"FAIL: want lm_head + CE: $want\"; echo \"$out\"; exit 1; }
    out=$(TITAN_AMX_LMHEAD_CE=0 $<TARGET_FILE:titan> kernels test embedding 2>&1) || exit 1
    echo \"$out\" | grep -q 'lm_head + CE: chunked logits;' || { echo \"FAIL: TITAN_AMX_LMHEAD_CE=0\"; echo \"$out\"; exit 1; }
    out=$(TITAN_AMX_GEMM=0 $<TARGET_FILE:titan> kernels test embedding 2>&1) || exit 1
    echo \"$out\" | grep -q 'lm_head + CE: chunked logits;' || { echo \"FAIL: TITAN_AMX_GEMM=0\"; echo \"$out\"; exit 1; }
    echo \"ok: lm_head + CE: $want\"")
set_tests_properties(kernels_amx_lmhead_ce_default PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=2" TIMEOUT 300)
# attention/bf16's products on AMX tiles (attention_gemm.c's amx mode; test_amx_attention.c
# checks it at the shapes it takes, T and head_dim multiples of 32): the default where the CPU
# has AMX-BF16, off with TITAN_AMX_ATTENTION=0, TITAN_AMX_GEMM=0 or the strided layout, a bad
# value said; and the dense layout's oneDNN products it replaced, still checked with it off
set_tests_properties(test_amx_attention PROPERTIES SKIP_RETURN_CODE 77)
add_test(NAME kernels_amx_attention_default COMMAND bash -c "out=$($<TARGET_FILE:titan> kernels test embedding 2>&1) || exit 1
    off_want=oneDNN
    case \"$out\" in *'bf16 engine: emulated'*) want=emulated off_want=emulated ;;
      *) want=oneDNN
        if grep -qw amx_bf16 /proc/cpuinfo; then want='AMX tiles'
        elif grep -qw avx512_bf16 /proc/cpuinfo && echo \"$out\" | grep -q 'CPU kernels ISA: avx512'; then
          want='AVX512_BF16 forward, oneDNN backward' off_want=$want; fi ;; esac
    echo \"$out\" | grep -q \"attention: $want;\" || { echo \"FAIL: want attention: $want\"; echo \"$out\"; exit 1; }
    for off in TITAN_AMX_ATTENTION=0 TITAN_AMX_GEMM=0 TITAN_AMX_LAYOUTS=0; do
      out=$(env $off $<TARGET_FILE:titan> kernels test embedding 2>&1) || exit 1
      echo \"$out\" | grep -q \"attention: $off_want;\" || { echo \"FAIL: $off: want attention: $off_want\"; echo \"$out\"; exit 1; }
    done
    echo \"ok: attention: $want\"")
set_tests_properties(kernels_amx_attention_default PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=2" TIMEOUT 300)
# grouped_mm/bf16's expert products on titan's vdpbf16ps kernel (grouped_dpbf16.c): the default
# on AVX512_BF16 without AMX (the AVX-512 kernel copy, the onednn engine), oneDNN's per-expert
# products with TITAN_GROUPED_DPBF16=0 and elsewhere; the conformance runs both
add_test(NAME kernels_grouped_dpbf16_default COMMAND bash -c "out=$($<TARGET_FILE:titan> kernels test grouped_mm/bf16 2>&1) || exit 1
    case \"$out\" in *'bf16 engine: emulated'*) want=emulated off_want=emulated ;;
      *) want=oneDNN off_want=oneDNN
        case \"$out\" in *\"titan's AMX GEMM: none\"*) ;; *) want=\"titan's AMX GEMM per expert\" off_want=$want ;; esac
        if ! grep -qw amx_bf16 /proc/cpuinfo && grep -qw avx512_bf16 /proc/cpuinfo &&
           echo \"$out\" | grep -q 'CPU kernels ISA: avx512'; then want=AVX512_BF16; fi ;; esac
    echo \"$out\" | grep -q \"experts: $want)\" || { echo \"FAIL: want experts: $want\"; echo \"$out\"; exit 1; }
    echo \"$out\" | grep -Eq 'ok +grouped_mm +bf16' || { echo \"FAIL: conformance\"; echo \"$out\"; exit 1; }
    out=$(TITAN_GROUPED_DPBF16=0 $<TARGET_FILE:titan> kernels test grouped_mm/bf16 2>&1) || exit 1
    echo \"$out\" | grep -q \"experts: $off_want)\" || { echo \"FAIL: TITAN_GROUPED_DPBF16=0: want experts: $off_want\"; echo \"$out\"; exit 1; }
    echo \"$out\" | grep -Eq 'ok +grouped_mm +bf16' || { echo \"FAIL: conformance with TITAN_GROUPED_DPBF16=0\"; echo \"$out\"; exit 1; }
    echo \"ok: experts: $want\"")
set_tests_properties(kernels_grouped_dpbf16_default PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=2" TIMEOUT 300
  PASS_REGULAR_EXPRESSION "ok: experts:" FAIL_REGULAR_EXPRESSION "FAIL")
add_test(NAME kernels_grouped_dpbf16_bad_value COMMAND titan kernels test grouped_mm/bf16)
set_tests_properties(kernels_grouped_dpbf16_bad_value PROPERTIES
  ENVIRONMENT "OMP_NUM_THREADS=2;TITAN_GROUPED_DPBF16=yes"
  PASS_REGULAR_EXPRESSION "TITAN_GROUPED_DPBF16=yes: not 0 or 1. grouped_mm/bf16 stays on AVX512_BF16 where it can"
  FAIL_REGULAR_EXPRESSION "FAIL|failed")
# the expert stacks kept in grouped_dpbf16's own layout in the bf16 weight copy (AdamW writes
# it; the kernel's dx reads it unpacked): an MoE bf16 run bitwise the same as with
# TITAN_GROUPED_LAYOUT=0 (checkpoint compared byte for byte), the layout said in the log where
# the expert kernel is titan's one-pass kernel (AVX512_BF16, or AMX tiles with TITAN_GROUPED_AMX=1:
# the _amx run) and nowhere else
set(TITAN_GROUPED_LAYOUT_TEST "d=$(mktemp -d) && trap 'rm -rf $d' EXIT
    for L in 0 1; do
      TITAN_GROUPED_LAYOUT=$L $<TARGET_FILE:titan> train --flavor debugmodel_moe --set n_layers=2 \
        --set num_experts=8 --random-tokens --batch 2 --seq-len 64 --steps 3 \
        --training.mixed_precision_param=bfloat16 --dump-folder $d/$L --checkpoint.enable=true \
        --checkpoint.interval=3 > $d/$L.log 2>&1 || { echo FAIL: run $L; cat $d/$L.log; exit 1; }
    done
    said=$(grep -c 'expert stacks in grouped_mm.s own layout' $d/1.log)
    if grep -Eq 'experts: (AMX tiles and )?AVX512_BF16' $d/1.log; then want=1; else want=0; fi
    [ \"$said\" = $want ] || { echo \"FAIL: layout said $said times, want $want\"; cat $d/1.log; exit 1; }
    ! grep -q 'own layout' $d/0.log || { echo 'FAIL: TITAN_GROUPED_LAYOUT=0 kept the layout'; exit 1; }
    cmp $d/0/checkpoint/step-3/rank-00000.safetensors $d/1/checkpoint/step-3/rank-00000.safetensors ||
      { echo 'FAIL: the layout changed the training'; exit 1; }
    echo \"ok: layout said $said time(s), checkpoints bitwise the same\"")
add_test(NAME train_moe_bf16_grouped_layout COMMAND bash -c "${TITAN_GROUPED_LAYOUT_TEST}")
set_tests_properties(train_moe_bf16_grouped_layout PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=2"
  TIMEOUT 300 PASS_REGULAR_EXPRESSION "ok: layout said" FAIL_REGULAR_EXPRESSION "FAIL")
# grouped_mm/bf16's products on AMX tiles (TITAN_GROUPED_AMX=1; opt-in: grouped_dpbf16.c's
# gd_gemm): the experts said to run there exactly where titan's AMX GEMM is on (the header's
# "titan's AMX GEMM" not none, the AVX-512 kernel copy), the conformance; test_ops (its
# grouped_mm/bf16 against double sums, shapes whose products take tiles, and the layout test)
# and the MoE layout training test with it; a bad value said on every CPU. Where there is no AMX
# they run the default path: make test-amx-emulated runs them on emulated tiles.
add_test(NAME kernels_grouped_amx COMMAND bash -c "out=$($<TARGET_FILE:titan> kernels test grouped_mm/bf16 2>&1) || exit 1
    if echo \"$out\" | grep -q \"titan's AMX GEMM: none\" || ! echo \"$out\" | grep -q 'CPU kernels ISA: avx512' ||
       echo \"$out\" | grep -q 'bf16 engine: emulated'; then want=no; else want=yes; fi
    if echo \"$out\" | grep -q 'experts: AMX tiles and AVX512_BF16)'; then got=yes; else got=no; fi
    [ $got = $want ] || { echo \"FAIL: experts on AMX tiles: $got, want $want\"; echo \"$out\"; exit 1; }
    echo \"$out\" | grep -Eq 'ok +grouped_mm +bf16' || { echo \"FAIL: conformance\"; echo \"$out\"; exit 1; }
    echo \"ok: experts on AMX tiles: $got\"")
set_tests_properties(kernels_grouped_amx PROPERTIES
  ENVIRONMENT "OMP_NUM_THREADS=2;TITAN_GROUPED_AMX=1" TIMEOUT 300
  PASS_REGULAR_EXPRESSION "ok: experts on AMX tiles" FAIL_REGULAR_EXPRESSION "FAIL")
add_test(NAME test_ops_grouped_amx COMMAND test_ops)
set_tests_properties(test_ops_grouped_amx PROPERTIES
  ENVIRONMENT "OMP_NUM_THREADS=2;TITAN_GROUPED_AMX=1" TIMEOUT 600)
add_test(NAME train_moe_bf16_grouped_layout_amx COMMAND bash -c "${TITAN_GROUPED_LAYOUT_TEST}")
set_tests_properties(train_moe_bf16_grouped_layout_amx PROPERTIES
  ENVIRONMENT "OMP_NUM_THREADS=2;TITAN_GROUPED_AMX=1" TIMEOUT 300
  PASS_REGULAR_EXPRESSION "ok: layout said" FAIL_REGULAR_EXPRESSION "FAIL")
add_test(NAME kernels_grouped_amx_bad_value COMMAND titan kernels test grouped_mm/bf16)
set_tests_properties(kernels_grouped_amx_bad_value PROPERTIES
  ENVIRONMENT "OMP_NUM_THREADS=2;TITAN_GROUPED_AMX=yes"
  PASS_REGULAR_EXPRESSION "TITAN_GROUPED_AMX=yes: not 0 or 1. grouped_mm/bf16's experts stay as they are"
  FAIL_REGULAR_EXPRESSION "FAIL|failed")
# a bad TITAN_GROUPED_LAYOUT is said, and what stays as it is (read where a bf16 model first
# offers its expert stacks: builds with the AVX512_BF16 kernel copy)
if(TITAN_HAVE_DPBF16)
  add_test(NAME train_grouped_layout_bad_value COMMAND bash -c "d=$(mktemp -d) && trap 'rm -rf $d' EXIT
      $<TARGET_FILE:titan> train --flavor debugmodel_moe --set n_layers=1 --set num_experts=8 \
        --random-tokens --batch 1 --seq-len 32 --steps 1 \
        --training.mixed_precision_param=bfloat16 --dump-folder $d")
  set_tests_properties(train_grouped_layout_bad_value PROPERTIES
    ENVIRONMENT "OMP_NUM_THREADS=2;TITAN_GROUPED_LAYOUT=yes" TIMEOUT 120
    PASS_REGULAR_EXPRESSION "TITAN_GROUPED_LAYOUT=yes: not 0 or 1. grouped_mm/bf16 keeps its weights in its own layout where it can")
endif()
# a bad TITAN_AMX_LMHEAD_CE or TITAN_AMX_ATTENTION is said, and what stays as it is
set(keeps_lmhead_ce "lm_head \\+ CE stays fused where it can")
set(keeps_attention "attention's products stay on AMX tiles where they can")
foreach(k lmhead_ce attention)
  string(TOUPPER ${k} K)
  add_test(NAME kernels_amx_${k}_bad_value COMMAND titan kernels test embedding)
  set_tests_properties(kernels_amx_${k}_bad_value PROPERTIES
    ENVIRONMENT "OMP_NUM_THREADS=2;TITAN_AMX_${K}=yes"
    PASS_REGULAR_EXPRESSION "TITAN_AMX_${K}=yes: not 0 or 1. ${keeps_${k}}"
    FAIL_REGULAR_EXPRESSION "FAIL|failed")
endforeach()
add_test(NAME kernels_conformance_amx_attention_off COMMAND titan kernels test attention)
set_tests_properties(kernels_conformance_amx_attention_off PROPERTIES
  ENVIRONMENT "OMP_NUM_THREADS=2;TITAN_AMX_LAYOUTS=attention;TITAN_AMX_ATTENTION=0" TIMEOUT 300
  PASS_REGULAR_EXPRESSION "ok +attention +bf16" FAIL_REGULAR_EXPRESSION "FAIL|failed|attention: AMX tiles")
add_test(NAME kernels_amx_gemm_bad_value COMMAND titan kernels test embedding)
set_tests_properties(kernels_amx_gemm_bad_value PROPERTIES
  ENVIRONMENT "OMP_NUM_THREADS=2;TITAN_AMX_GEMM=yes"
  PASS_REGULAR_EXPRESSION "TITAN_AMX_GEMM=yes: not 0 or 1. titan's AMX GEMM stays off.*titan's AMX GEMM: none"
  FAIL_REGULAR_EXPRESSION "FAIL|failed")
add_test(NAME kernels_bench_smoke COMMAND titan kernels bench rope_bhsd --shape small
  --plugin ${CMAKE_BINARY_DIR}/examples/librope_bhsd.so)
# grouped_mm is timed as one MoE layer's three expert projections at a flavor's expert shapes.
add_test(NAME kernels_bench_moe_plugin COMMAND titan kernels bench grouped_tiles
  --flavor debugmodel_moe --batch 1 --seq 8 --min-time 0
  --plugin ${CMAKE_BINARY_DIR}/examples/libgrouped_tiles.so)
set_tests_properties(kernels_bench_moe_plugin PROPERTIES PASS_REGULAR_EXPRESSION
  "experts 64 top_k 8 moe_ffn 768\n.*grouped_mm +grouped_tiles +fwd .*GFLOP/s\n.*grouped_mm +grouped_tiles +bwd")
# A bf16 implementation's weight is read from a mirror made once, as in training (not
# converted per call); checked on grouped_mm's expert stack (matmul and lmhead_ce take the same
# path in ops_conform_bench).
add_test(NAME kernels_bench_bf16_weights COMMAND titan kernels bench grouped_mm/bf16
  --flavor debugmodel_moe --batch 1 --seq 8 --min-time 0)
set_tests_properties(kernels_bench_bf16_weights PROPERTIES PASS_REGULAR_EXPRESSION
  "grouped_mm +bf16 +bf16 weight read from a copy made once.*\n.*grouped_mm +bf16 +fwd .*GFLOP/s\n.*grouped_mm +bf16 +bwd"
  FAIL_REGULAR_EXPRESSION "converted per call" ENVIRONMENT "OMP_NUM_THREADS=2" TIMEOUT 300)
# grouped_mm's bench routing: by default skewed and drawn afresh before each call, the median
# call reported (the skew printed must be a real one, not an even split); even on request;
# anything else refused by name.
add_test(NAME kernels_bench_routing COMMAND titan kernels bench grouped_mm/default --shape small
  --min-time 0)
set_tests_properties(kernels_bench_routing PROPERTIES PASS_REGULAR_EXPRESSION
  "routing: skewed, drawn afresh before each call.*\n.*fwd: median of [0-9]+ calls, each a fresh routing \\(most loaded expert ([2-9]|[1-9][0-9])\\.[0-9]x the mean.*\n.*grouped_mm +default +fwd .*GFLOP/s")
add_test(NAME kernels_bench_routing_even COMMAND titan kernels bench grouped_mm/default
  --shape small --min-time 0 --routing even)
set_tests_properties(kernels_bench_routing_even PROPERTIES PASS_REGULAR_EXPRESSION
  "routing: even, R/E rows each, the same every call\n.*grouped_mm +default +fwd .*GFLOP/s"
  FAIL_REGULAR_EXPRESSION "median")
add_test(NAME kernels_bench_routing_bad COMMAND titan kernels bench grouped_mm --routing odd)
set_tests_properties(kernels_bench_routing_bad PROPERTIES PASS_REGULAR_EXPRESSION
  "kernels: --routing is 'skewed' or 'even', not 'odd'")
set_tests_properties(kernels_bench_routing kernels_bench_routing_even kernels_bench_routing_bad
  PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=2" TIMEOUT 300)
# The plugin trains: losses equal to the built-in's within the conformance tolerance on the
# MoE debug flavor and a shrunk 30B-A3B-reduced, by layer path too, and its constraint refused
# at model build.
add_test(NAME kernels_moe_plugin_train
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/scripts/moe_plugin.sh $<TARGET_FILE:titan>
          ${TITAN_SHARED}/data/tinyshakespeare/input.txt
          ${CMAKE_BINARY_DIR}/examples/libgrouped_tiles.so)
set_tests_properties(kernels_conformance_moe_plugin kernels_bench_moe_plugin
  kernels_moe_plugin_train PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=2" TIMEOUT 300)

# Bench shapes from the flavor registry, with batch and sequence replaced; an unknown flavor is
# refused with the known ones listed.
add_test(NAME kernels_bench_flavor COMMAND titan kernels bench rope/default --flavor debugmodel
  --batch 1 --seq 64 --min-time 0)
set_tests_properties(kernels_bench_flavor PROPERTIES PASS_REGULAR_EXPRESSION
  "shape: batch 1 seq 64 dim 256 heads 16/8 head_dim 128 ffn 3072 vocab 2048\n.*rope +default +fwd")
add_test(NAME kernels_bench_flavor_unknown COMMAND titan kernels bench --flavor 0.5B)
set_tests_properties(kernels_bench_flavor_unknown PROPERTIES PASS_REGULAR_EXPRESSION
  "unknown model flavor '0.5B' \\(known: debugmodel, 0.6B")
set_tests_properties(kernels_conformance kernels_conformance_plugin kernels_conformance_plugin_ws
  kernels_conformance_plugin_norm kernels_bench_smoke kernels_bench_flavor
  kernels_bench_flavor_unknown PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=2" TIMEOUT 300)

# A plugin is native code: opening it runs its constructors. Read-only commands (printing a
# config, titan plan) never open one; a training run and titan kernels do.
add_test(NAME kernels_plugin_not_loaded_readonly
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/scripts/plugin_readonly.sh $<TARGET_FILE:titan>
          ${TITAN_TEST_PLUGIN_DIR}/libtest_plugin_marker.so)
# attention/bf16 off its AVX512_BF16 forward (src/ops/cpu/attention_dpbf16.c), the two ways a run
# turns it off: the baseline kernel copies (oneDNN's GEMM calls) and the emulated engine. Where
# the CPU has no AVX512_BF16 these repeat test_attention's bf16 checks on the same path.
add_test(NAME test_attention_bf16_isa_default COMMAND test_attention --no-bench --only bf16)
set_tests_properties(test_attention_bf16_isa_default PROPERTIES
  ENVIRONMENT "OMP_NUM_THREADS=2;TITAN_ISA=default" TIMEOUT 300)
add_test(NAME test_attention_bf16_emulated COMMAND test_attention --no-bench --only bf16)
set_tests_properties(test_attention_bf16_emulated PROPERTIES
  ENVIRONMENT "OMP_NUM_THREADS=2;TITAN_BF16_ENGINE=emulated" TIMEOUT 300)

# What a run records of its kernels: the header and the report list every unit's non-default
# kernel (a plugin's with its path), and a NaN a plugin writes stops the run naming it.
add_test(NAME kernels_run_record
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/scripts/kernel_record.sh $<TARGET_FILE:titan>
          ${CMAKE_BINARY_DIR}/examples/librope_bhsd.so ${TITAN_TEST_PLUGIN_DIR}/libtest_plugin_nan.so
          ${TITAN_TEST_PLUGIN_DIR}/libtest_plugin_tile32.so)
set_tests_properties(kernels_run_record PROPERTIES TIMEOUT 120)
# A checkpoint trained with a plugin kernel resumes without it and the reverse, said in a warning.
add_test(NAME kernels_resume_switch
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/scripts/kernel_resume.sh $<TARGET_FILE:titan>
          ${CMAKE_BINARY_DIR}/examples/librope_bhsd.so)
set_tests_properties(kernels_resume_switch PROPERTIES TIMEOUT 120)
