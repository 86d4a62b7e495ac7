# Bitwise determinism of whole training runs (and of full activation checkpointing).
add_test(NAME train_determinism
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/scripts/determinism.sh $<TARGET_FILE:titan>
          ${TITAN_SHARED}/data/tinyshakespeare/input.txt)
set_tests_properties(train_determinism PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=2" TIMEOUT 600)
