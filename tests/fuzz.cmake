# Fuzz targets (tests/fuzz/fuzz.h). Each target gets:
#  - fuzz_<name>: the standalone driver (tests/fuzz/driver.c) linked with the target, run by
#    ctest on the target's corpus (bad_* must be rejected, good_* accepted) plus a few
#    thousand deterministic mutations of the good_* seeds. Any compiler; ASan friendly.
#  - libfuzzer_<name>: a libFuzzer binary, only when the C compiler is clang with
#    -fsanitize=fuzzer (`make fuzz` builds it with clang-14 in build-fuzz and runs it). The
#    target's library sources are compiled into it so libFuzzer sees their coverage; whatever
#    else they call comes from titan_core, linked after them (uninstrumented, and never a
#    second copy of a listed source: an archive member is pulled only for a missing symbol).
include(CheckCSourceCompiles)
if(CMAKE_C_COMPILER_ID MATCHES "Clang")
  set(CMAKE_REQUIRED_FLAGS "-fsanitize=fuzzer")
  set(CMAKE_REQUIRED_LINK_OPTIONS "-fsanitize=fuzzer")
  check_c_source_compiles("
    #include <stddef.h>
    #include <stdint.h>
    int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { return 0; }" TITAN_HAVE_LIBFUZZER)
  unset(CMAKE_REQUIRED_FLAGS)
  unset(CMAKE_REQUIRED_LINK_OPTIONS)
endif()

# titan_fuzz_target(NAME SOURCE CORPUS MUTATIONS LIB_SOURCES...)
function(titan_fuzz_target name source corpus mutations)
  add_executable(fuzz_${name} ${CMAKE_SOURCE_DIR}/tests/fuzz/driver.c ${source})
  target_include_directories(fuzz_${name} PRIVATE ${CMAKE_SOURCE_DIR}/tests/fuzz)
  target_link_libraries(fuzz_${name} PRIVATE titan_core)
  add_test(NAME fuzz_${name} COMMAND fuzz_${name} --mutations ${mutations} ${corpus})
  set_tests_properties(fuzz_${name} PROPERTIES TIMEOUT 300)
  if(TITAN_HAVE_LIBFUZZER)
    add_executable(libfuzzer_${name} EXCLUDE_FROM_ALL ${source} ${ARGN})
    target_include_directories(libfuzzer_${name} PRIVATE ${CMAKE_SOURCE_DIR}/tests/fuzz
                               ${CMAKE_SOURCE_DIR}/src)
    target_compile_options(libfuzzer_${name} PRIVATE -fsanitize=fuzzer,address,undefined -g)
    target_link_options(libfuzzer_${name} PRIVATE -fsanitize=fuzzer,address,undefined)
    target_link_libraries(libfuzzer_${name} PRIVATE titan_core OpenMP::OpenMP_C ${TITAN_JANSSON}
                          ${TITAN_UTF8PROC} ${TITAN_PCRE2} m)
  endif()
endfunction()

titan_fuzz_target(safetensors ${CMAKE_SOURCE_DIR}/tests/fuzz/fuzz_safetensors.c
  ${CMAKE_SOURCE_DIR}/tests/fuzz/corpus/safetensors 10000
  ${CMAKE_SOURCE_DIR}/src/checkpoint/safetensors.c ${CMAKE_SOURCE_DIR}/src/base/base.c
  ${CMAKE_SOURCE_DIR}/src/base/fs.c)

# The tokenizer files (tokenizer.json + tokenizer_config.json) and the dataset readers
# (token shard header and offsets, JSON Lines, text); corpora from make_data_corpus.py.
titan_fuzz_target(tokenizer ${CMAKE_SOURCE_DIR}/tests/fuzz/fuzz_tokenizer.c
  ${CMAKE_SOURCE_DIR}/tests/fuzz/corpus/tokenizer 1500
  ${CMAKE_SOURCE_DIR}/src/data/tokenizer.c ${CMAKE_SOURCE_DIR}/src/base/base.c
  ${CMAKE_SOURCE_DIR}/src/base/fs.c)
titan_fuzz_target(dataset ${CMAKE_SOURCE_DIR}/tests/fuzz/fuzz_dataset.c
  ${CMAKE_SOURCE_DIR}/tests/fuzz/corpus/dataset 4000
  ${CMAKE_SOURCE_DIR}/src/data/dataset.c ${CMAKE_SOURCE_DIR}/src/data/loader.c
  ${CMAKE_SOURCE_DIR}/src/data/tokenizer.c ${CMAKE_SOURCE_DIR}/src/base/base.c
  ${CMAKE_SOURCE_DIR}/src/base/fs.c)

# Job configs (TOML parser + train config), Hugging Face config.json and a checkpoint's
# metadata.json with the trainer's and data loader's state; corpora from
# make_config_corpus.py.
titan_fuzz_target(config ${CMAKE_SOURCE_DIR}/tests/fuzz/fuzz_config.c
  ${CMAKE_SOURCE_DIR}/tests/fuzz/corpus/config 2000
  ${CMAKE_SOURCE_DIR}/src/base/toml.c ${CMAKE_SOURCE_DIR}/src/train/config.c
  ${CMAKE_SOURCE_DIR}/src/train/config_cli.c ${CMAKE_SOURCE_DIR}/src/train/config_print.c
  ${CMAKE_SOURCE_DIR}/src/base/base.c)
titan_fuzz_target(hf_config ${CMAKE_SOURCE_DIR}/tests/fuzz/fuzz_hf_config.c
  ${CMAKE_SOURCE_DIR}/tests/fuzz/corpus/hf_config 500
  ${CMAKE_SOURCE_DIR}/src/checkpoint/hf_config.c ${CMAKE_SOURCE_DIR}/src/model/args.c)
titan_fuzz_target(ckpt_meta ${CMAKE_SOURCE_DIR}/tests/fuzz/fuzz_ckpt_meta.c
  ${CMAKE_SOURCE_DIR}/tests/fuzz/corpus/ckpt_meta 500
  ${CMAKE_SOURCE_DIR}/src/checkpoint/step.c ${CMAKE_SOURCE_DIR}/src/train/state.c
  ${CMAKE_SOURCE_DIR}/src/train/state_check.c ${CMAKE_SOURCE_DIR}/src/train/moe.c
  ${CMAKE_SOURCE_DIR}/src/model/args.c ${CMAKE_SOURCE_DIR}/src/data/loader.c
  ${CMAKE_SOURCE_DIR}/src/data/dataset.c)
