# torchtitan launch and model options (issue 17): torchrun's variables refused by name with
# the mpirun line (its mpirun parts skipped without MPI), and torchtitan v0.2.2's init.
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
