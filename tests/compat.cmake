# torchtitan launch and model options (issue 17): torchrun's variables refused by name with
# the mpirun line (its mpirun parts skipped without MPI), attn_backend, torchtitan v0.2.2's init.
find_program(TITAN_MPIRUN_COMPAT NAMES mpirun mpiexec)
set(TITAN_TORCHRUN_MPIRUN "")
if(TARGET MPI::MPI_C AND TITAN_MPIRUN_COMPAT)
  set(TITAN_TORCHRUN_MPIRUN ${TITAN_MPIRUN_COMPAT})
endif()
add_test(NAME train_torchrun_refused
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/scripts/torchrun.sh $<TARGET_FILE:titan>
          "${TITAN_TORCHRUN_MPIRUN}")
set_tests_properties(train_torchrun_refused PROPERTIES TIMEOUT 300 RUN_SERIAL TRUE)
if(TITAN_SANITIZE)
  set_tests_properties(train_torchrun_refused PROPERTIES ENVIRONMENT "ASAN_OPTIONS=detect_leaks=0")
endif()
# model.attn_backend (sdpa | flex | varlen: the same losses; others refused by name), and
# model.depth_init / init_weights refusals
add_test(NAME config_model_options
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/scripts/model_options.sh $<TARGET_FILE:titan>)
set_tests_properties(config_model_options PROPERTIES TIMEOUT 300)
# torchtitan v0.2.2 init: per-group statistics and the first-step loss against a PyTorch
# reference built with torchtitan's rules (tests/reference/torchtitan_init.py)
add_test(NAME model_init_torchtitan
  COMMAND ${TITAN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/reference/torchtitan_init.py
          $<TARGET_FILE:titan>)
set_tests_properties(model_init_torchtitan PROPERTIES TIMEOUT 900)
