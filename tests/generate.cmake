# titan generate: greedy parity with transformers' generate() on titan's HF exports (the
# train_export_tie* fixtures), sampling reproducibility, training-checkpoint loading, --chat
# with the Qwen3 tokenizer stopping at <|im_end|>, hostile input.
# Included by tests/CMakeLists.txt, which sets TITAN_PYTHON and TITAN_SHARED.
add_test(NAME generate_reference
  COMMAND ${TITAN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/reference/check_generate.py
          $<TARGET_FILE:titan> ${TITAN_SHARED} ${CMAKE_BINARY_DIR}/generate
          ${CMAKE_BINARY_DIR}/export_tie0 ${CMAKE_BINARY_DIR}/export_tie1)
set_tests_properties(generate_reference PROPERTIES
  FIXTURES_REQUIRED "export_tie0;export_tie1" ENVIRONMENT "OMP_NUM_THREADS=2" TIMEOUT 300)

# The command line's edges (tests/reference/check_generate_cli.py): padding ids past the
# tokenizer, tiny temperatures, write errors on stdout, NULs in a stdin prompt, no tokenizer.
add_test(NAME generate_cli_edges
  COMMAND ${TITAN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/reference/check_generate_cli.py
          $<TARGET_FILE:titan> ${TITAN_SHARED} ${CMAKE_BINARY_DIR}/generate_cli)
set_tests_properties(generate_cli_edges PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=2" TIMEOUT 300)

if(TARGET test_generate)
  # the streaming-text check reads ../shared/data/qwen3_tokenizer
  target_compile_definitions(test_generate PRIVATE TITAN_SHARED_DIR="${TITAN_SHARED}")
endif()

# --threads is bounded (CPUs x BASE_THREADS_PER_CPU, with a warning): 100000 used to crash.
add_test(NAME generate_threads_bound
  COMMAND $<TARGET_FILE:titan> generate --model ${CMAKE_BINARY_DIR}/export_tie0 --bytes --threads 100000
          --prompt "To be" --max-new-tokens 4 --temperature 0)
set_tests_properties(generate_threads_bound PROPERTIES FIXTURES_REQUIRED export_tie0
  PASS_REGULAR_EXPRESSION "100000 threads asked for, [0-9]+ CPUs here: using [0-9]+.*generated 4 tokens")
