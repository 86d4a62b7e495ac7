# Flavor parameter counts against HF Qwen3ForCausalLM built from the official configs.
add_test(NAME hf_param_counts
  COMMAND ${TITAN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/reference/param_counts.py
          $<TARGET_FILE:titan> ${TITAN_SHARED}/data)
