# Job configs. test_config (tests/unit) reads configs/ from the source tree.
target_compile_definitions(test_config PRIVATE TITAN_SOURCE_DIR="${CMAKE_SOURCE_DIR}")

# Every shipped config loads through the command line, and --print-config's output reads
# back to the same config (print -> load -> print is a fixed point).
add_test(NAME config_print_roundtrip
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/scripts/config_roundtrip.sh $<TARGET_FILE:titan>
          ${CMAKE_SOURCE_DIR}/configs)
# A misspelt override names the option and suggests the field.
add_test(NAME config_cli_suggests
  COMMAND $<TARGET_FILE:titan> train --config ${CMAKE_SOURCE_DIR}/configs/qwen3_debug.toml
          --training.stpes 3)
set_tests_properties(config_cli_suggests PROPERTIES PASS_REGULAR_EXPRESSION
  "unknown option '--training.stpes'. did you mean '--training.steps'\\?")

# docs/config.md (the config reference) is the current `titan train --help`.
add_test(NAME config_reference_current
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/scripts/config_doc.sh $<TARGET_FILE:titan>
          ${CMAKE_SOURCE_DIR}/docs/config.md)

# torchtitan v0.2.2's Qwen3 and Llama3-debug TOMLs, unmodified (tests/fixtures/torchtitan):
# --print-config round-trips, 2 steps train on a shrunk model; job.print_config,
# memory_estimation.enable and lr_scheduler.total_steps < training.steps as torchtitan.
add_test(NAME config_torchtitan_tomls
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/scripts/torchtitan_configs.sh $<TARGET_FILE:titan>
          ${CMAKE_CURRENT_SOURCE_DIR}/fixtures/torchtitan ${TITAN_SHARED}/data)

# Command-line guards: bare train, --alias=value, argument checks, messages, thread bound,
# process name.
add_test(NAME cli_guards
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/scripts/cli_guards.sh $<TARGET_FILE:titan>
          ${TITAN_SHARED}/data/test_tokenizer)
set_tests_properties(cli_guards PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=2" TIMEOUT 120)
if(TITAN_SANITIZE) # ASan reserves terabytes of address space and has its own SIGBUS report
  set_tests_properties(cli_guards PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=2;TITAN_TEST_SANITIZED=1")
endif()

# make train / make build install the build dependencies only; make test everything.
add_test(NAME make_deps_modes
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/scripts/make_deps.sh ${CMAKE_SOURCE_DIR})
# a cgroup CPU quota: as many threads as its CPUs (OMP_NUM_THREADS and --threads still choose)
add_test(NAME cpu_quota
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/scripts/cpu_quota.sh $<TARGET_FILE:titan>)
set_tests_properties(cpu_quota PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77)
