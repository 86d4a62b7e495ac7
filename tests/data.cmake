# The data pipeline: titan tokenize / titan data against torchtitan v0.2.2's packing over the
# Hugging Face Rust tokenizer (tests/reference/check_loader.py).
# Included by tests/CMakeLists.txt, which sets TITAN_PYTHON and TITAN_SHARED.
add_test(NAME loader_reference
  COMMAND ${TITAN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/reference/check_loader.py
          $<TARGET_FILE:titan> ${TITAN_SHARED} ${CMAKE_BINARY_DIR}/loader_reference)
set_tests_properties(loader_reference PROPERTIES
  ENVIRONMENT "OMP_NUM_THREADS=2;RAYON_NUM_THREADS=2" TIMEOUT 300)

# A weighted mixture of datasets (training.dataset_sources) against torchtitan 0.3's
# interleaved loaders: Python's random draws over the per-source references, and 0.3's own
# InterleavedDataset where torchtitan is installed (tests/reference/check_mix.py).
add_test(NAME loader_mix
  COMMAND ${TITAN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/reference/check_mix.py
          $<TARGET_FILE:titan> ${TITAN_SHARED} ${CMAKE_BINARY_DIR}/loader_mix)
set_tests_properties(loader_mix PROPERTIES
  ENVIRONMENT "OMP_NUM_THREADS=2;RAYON_NUM_THREADS=2" TIMEOUT 300)

if(TARGET test_loader)
  target_compile_definitions(test_loader PRIVATE TITAN_SHARED_DIR="${TITAN_SHARED}")
endif()

# `titan plan` warns when the training data has fewer documents than data-parallel ranks.
add_test(NAME plan_data
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/scripts/plan_data.sh $<TARGET_FILE:titan>)

# A JSONL line the memory cannot hold is an error naming the file and line, not the end of
# the data (under an address-space limit measured from titan's own start-up; not in the
# sanitizer build, whose shadow memory needs terabytes of address space).
if(NOT TITAN_SANITIZE)
  add_test(NAME data_long_line
    COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/scripts/data_long_line.sh $<TARGET_FILE:titan>)
  set_tests_properties(data_long_line PROPERTIES TIMEOUT 300)
endif()
# titan tokenize failing midway (disk full) removes the shards it wrote, and says so
# A run started beside a tokenize writing its folder refuses it (strace holds the timing).
add_test(NAME tokenize_race
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/scripts/tokenize_race.sh $<TARGET_FILE:titan>
          ${TITAN_SHARED}/data/test_tokenizer ${TITAN_PYTHON})
set_tests_properties(tokenize_race PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77)
add_test(NAME tokenize_partial
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/scripts/tokenize_partial.sh $<TARGET_FILE:titan>
          ${TITAN_SHARED}/data/test_tokenizer ${TITAN_PYTHON})
set_tests_properties(tokenize_partial PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77)
