# Tokenizer parity with Hugging Face `tokenizers` (tests/reference/tokenizer_parity.py) for
# the Qwen3 tokenizer and the small ByteLevel test tokenizer in ../shared/data.
# Included by tests/CMakeLists.txt, which sets TITAN_PYTHON and TITAN_SHARED.

if(TARGET test_tokenizer)
  # the unit test reads ../shared/data/{qwen3_tokenizer,test_tokenizer,tokenizer_vectors}
  target_compile_definitions(test_tokenizer PRIVATE TITAN_SHARED_DIR="${TITAN_SHARED}")

  set(TITAN_TOK_DIR ${CMAKE_BINARY_DIR}/tokenizer)
  file(MAKE_DIRECTORY ${TITAN_TOK_DIR})
  foreach(tok qwen3_tokenizer test_tokenizer)
    set(ref ${TITAN_TOK_DIR}/${tok}.bin)
    add_test(NAME tokenizer_reference_${tok}
      COMMAND ${TITAN_PYTHON} ${CMAKE_SOURCE_DIR}/tests/reference/tokenizer_parity.py
              --tokenizer ${TITAN_SHARED}/data/${tok} --shared ${TITAN_SHARED} --out ${ref})
    set_tests_properties(tokenizer_reference_${tok} PROPERTIES
      FIXTURES_SETUP tok_ref_${tok} ENVIRONMENT "OMP_NUM_THREADS=2;RAYON_NUM_THREADS=2" TIMEOUT 300)
    add_test(NAME tokenizer_parity_${tok}
      COMMAND test_tokenizer --parity ${TITAN_SHARED}/data/${tok} ${ref})
    set_tests_properties(tokenizer_parity_${tok} PROPERTIES
      FIXTURES_REQUIRED tok_ref_${tok} TIMEOUT 300)
  endforeach()
endif()

# The command line: titan encode / decode against the HF Rust tokenizer.
add_test(NAME tokenizer_cli_qwen3
  COMMAND ${TITAN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/reference/check_codec_cli.py
          $<TARGET_FILE:titan> ${TITAN_SHARED}/data/qwen3_tokenizer
          ${TITAN_SHARED}/data/tinyshakespeare/input.txt)

if(TARGET test_chat)
  # the chat template test reads ../shared/data/{qwen3_tokenizer,tokenizer_vectors}
  target_compile_definitions(test_chat PRIVATE TITAN_SHARED_DIR="${TITAN_SHARED}")
endif()

# tokenizer_config.json's added_tokens_decoder is vocabulary (torchtitan's test tokenizer lists
# its special tokens only there): titan encode / decode against transformers' AutoTokenizer, and
# the ids transformers 5 gives entries not yet in the tokenizer (v0.2.2's test tokenizer, a
# made-up config).
add_test(NAME tokenizer_added_tokens_decoder
  COMMAND ${TITAN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/reference/check_added_tokens_decoder.py
          $<TARGET_FILE:titan> ${TITAN_SHARED}/data/test_tokenizer
          ${TITAN_SHARED}/data/tinyshakespeare/input.txt ${CMAKE_BINARY_DIR}/added_tokens_decoder)
set_tests_properties(tokenizer_added_tokens_decoder PROPERTIES
  ENVIRONMENT "OMP_NUM_THREADS=2;RAYON_NUM_THREADS=2" TIMEOUT 300)
