# Parity with Hugging Face transformers (Qwen3ForCausalLM, PyTorch CPU fp32, eager attention;
# bf16 autocast for the bf16 targets)
# and safetensors interop with the Python `safetensors` package.
# Included by tests/CMakeLists.txt, which sets TITAN_PYTHON (the .venv interpreter) and
# TITAN_SHARED (../shared).

set(TITAN_PARITY_DIR ${CMAKE_BINARY_DIR}/parity)
file(MAKE_DIRECTORY ${TITAN_PARITY_DIR}/safetensors)
set(TITAN_REF_DIR ${CMAKE_SOURCE_DIR}/tests/reference)

add_executable(test_hf_parity ${CMAKE_SOURCE_DIR}/tests/parity/test_hf_parity.c)
target_link_libraries(test_hf_parity PRIVATE titan_core)

# One fixture per config: hf_reference_<cfg> writes weights + reference outputs (fp32, and the
# same forward/backward under torch.autocast(cpu, bfloat16)), hf_parity_<cfg> compares titan
# against them (and writes titan's gradients), hf_parity_grads_<cfg>_safetensors loads those
# gradients with the Python package, and hf_parity_bf16_<cfg> compares titan's bf16 mixed
# precision with autocast and both with fp32 (issue 16; moe_aux has an autocast routing flip).
foreach(cfg gqa_tied untied mha_long moe moe_sparse moe_aux odd_dims moe_flip docs docs_moe)
  set(dir ${TITAN_PARITY_DIR}/${cfg})
  add_test(NAME hf_reference_${cfg}
    COMMAND ${TITAN_PYTHON} ${TITAN_REF_DIR}/hf_reference.py --config ${cfg} --out ${dir})
  set_tests_properties(hf_reference_${cfg} PROPERTIES
    FIXTURES_SETUP hf_ref_${cfg} ENVIRONMENT "OMP_NUM_THREADS=2" TIMEOUT 300)

  add_test(NAME hf_parity_${cfg} COMMAND test_hf_parity ${dir})
  set_tests_properties(hf_parity_${cfg} PROPERTIES
    FIXTURES_REQUIRED hf_ref_${cfg} FIXTURES_SETUP hf_grads_${cfg}
    ENVIRONMENT "OMP_NUM_THREADS=2" TIMEOUT 300)

  add_test(NAME hf_parity_bf16_${cfg} COMMAND test_hf_parity --prec bf16 ${dir})
  set_tests_properties(hf_parity_bf16_${cfg} PROPERTIES
    FIXTURES_REQUIRED hf_ref_${cfg} ENVIRONMENT "OMP_NUM_THREADS=2" TIMEOUT 300)

  add_test(NAME hf_parity_grads_${cfg}_safetensors
    COMMAND ${TITAN_PYTHON} ${TITAN_REF_DIR}/check_safetensors.py --grads ${dir})
  set_tests_properties(hf_parity_grads_${cfg}_safetensors PROPERTIES
    FIXTURES_REQUIRED "hf_ref_${cfg};hf_grads_${cfg}" ENVIRONMENT "OMP_NUM_THREADS=2" TIMEOUT 300)
endforeach()

# safetensors both ways, independent of the model: titan's writer -> Python reader, and
# Python's writer (BF16/F16/F32/F64/I64/I32) -> titan's reader.
if(TARGET test_safetensors)
  # lets the unit test read the BF16 fixture ../shared/data/tiny_qwen3/model.safetensors
  target_compile_definitions(test_safetensors PRIVATE TITAN_SHARED_DIR="${TITAN_SHARED}")

  set(st_titan ${TITAN_PARITY_DIR}/safetensors/titan_fixture.safetensors)
  set(st_python ${TITAN_PARITY_DIR}/safetensors/python_fixture.safetensors)
  add_test(NAME safetensors_titan_write COMMAND test_safetensors --write-fixture ${st_titan})
  set_tests_properties(safetensors_titan_write PROPERTIES FIXTURES_SETUP st_titan_file)
  add_test(NAME safetensors_python_reads_titan
    COMMAND ${TITAN_PYTHON} ${TITAN_REF_DIR}/check_safetensors.py --check ${st_titan})
  set_tests_properties(safetensors_python_reads_titan PROPERTIES
    FIXTURES_REQUIRED st_titan_file ENVIRONMENT "OMP_NUM_THREADS=2" TIMEOUT 300)

  add_test(NAME safetensors_python_write
    COMMAND ${TITAN_PYTHON} ${TITAN_REF_DIR}/check_safetensors.py --make ${st_python})
  set_tests_properties(safetensors_python_write PROPERTIES
    FIXTURES_SETUP st_python_file ENVIRONMENT "OMP_NUM_THREADS=2" TIMEOUT 300)
  add_test(NAME safetensors_titan_reads_python COMMAND test_safetensors --check-python ${st_python})
  set_tests_properties(safetensors_titan_reads_python PROPERTIES FIXTURES_REQUIRED st_python_file)
endif()
