# Hugging Face interop (issue 4): config.json, sharded folders, export dtypes, inspect/convert,
# checked against transformers and the safetensors package (tests/reference/hf_interop.py).
# Included by tests/CMakeLists.txt, which sets TITAN_PYTHON and TITAN_SHARED.

if(TARGET test_hf)
  # the unit test reads ../shared/data/{qwen3_configs,tiny_qwen3}
  target_compile_definitions(test_hf PRIVATE TITAN_SHARED_DIR="${TITAN_SHARED}")
endif()

add_executable(test_hf_io ${CMAKE_SOURCE_DIR}/tests/parity/test_hf_io.c)
target_link_libraries(test_hf_io PRIVATE titan_core)

set(TITAN_HF_DIR ${CMAKE_BINARY_DIR}/hf_interop)
set(TITAN_HF_PY ${CMAKE_SOURCE_DIR}/tests/reference/hf_interop.py)
# titan inspect of every official config (dense and MoE) = HF's parameter count
add_test(NAME hf_config_param_counts
  COMMAND ${TITAN_PYTHON} ${TITAN_HF_PY} counts $<TARGET_FILE:titan> ${TITAN_SHARED}/data)
# titan's exports, read by transformers and safetensors
add_test(NAME hf_export_transformers
  COMMAND ${TITAN_PYTHON} ${TITAN_HF_PY} export $<TARGET_FILE:test_hf_io> ${TITAN_HF_DIR}/export)
# transformers' save_pretrained, read by titan; HF -> titan -> HF byte-identical
add_test(NAME hf_import_transformers
  COMMAND ${TITAN_PYTHON} ${TITAN_HF_PY} import $<TARGET_FILE:test_hf_io> $<TARGET_FILE:titan>
          ${TITAN_HF_DIR}/import)
# the same for an MoE: per-expert HF tensors <-> titan's [E, out, in] stacks
add_test(NAME hf_import_moe_transformers
  COMMAND ${TITAN_PYTHON} ${TITAN_HF_PY} import_moe $<TARGET_FILE:test_hf_io> $<TARGET_FILE:titan>
          ${TITAN_HF_DIR}/import_moe)
# titan inspect PATH: malformed files exit non-zero with the error, good ones list tensors
add_test(NAME hf_inspect_cli
  COMMAND ${TITAN_PYTHON} ${TITAN_HF_PY} inspect $<TARGET_FILE:titan>
          ${CMAKE_SOURCE_DIR}/tests/fuzz/corpus/safetensors)
# config.json variants as transformers reads them; convert's guards; the exported context
add_test(NAME hf_config_variants
  COMMAND ${TITAN_PYTHON} ${TITAN_HF_PY} config $<TARGET_FILE:titan> ${TITAN_HF_DIR}/config)
set_tests_properties(hf_config_param_counts hf_export_transformers hf_import_transformers
  hf_import_moe_transformers hf_inspect_cli hf_config_variants
  PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=2" TIMEOUT 300)
# what an HF folder's weights load as: mixed dtypes exact, non-finite / FP8 / quantized /
# hostile indexes refused by name, MoE norm_topk_prob false and its bf16 export in transformers
add_test(NAME hf_load_dtypes
  COMMAND ${TITAN_PYTHON} ${TITAN_HF_PY} loads $<TARGET_FILE:test_hf_io> $<TARGET_FILE:titan>
          ${TITAN_HF_DIR}/loads)
set_tests_properties(hf_load_dtypes PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=2" TIMEOUT 300)
# an export into a folder holding an earlier one replaces it whole (weights, index, generation
# config; config.json written last, so a killed export leaves no model); the expert bias said
# A folder re-exported while generate reads it: refused, naming the replaced file (strace).
add_test(NAME hf_read_race
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/scripts/hf_read_race.sh $<TARGET_FILE:titan>)
set_tests_properties(hf_read_race PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=2" TIMEOUT 120
                     SKIP_RETURN_CODE 77)
add_test(NAME hf_export_replace
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/scripts/export_replace.sh $<TARGET_FILE:titan>
          ${TITAN_SHARED} ${TITAN_PYTHON})
set_tests_properties(hf_export_replace PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=2" TIMEOUT 300)
