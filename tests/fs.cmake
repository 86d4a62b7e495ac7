# Nothing outside the run is touched (docs/architecture.md, "Files"): checkpoint removal
# never follows a link and finishes a killed prune's leftovers; atomic writes replace a
# planted "<file>.tmp" link instead of writing through it; one run per folder.
add_test(NAME checkpoint_symlinks
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/scripts/ckpt_symlinks.sh $<TARGET_FILE:titan>)
add_test(NAME atomic_links
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/scripts/atomic_links.sh $<TARGET_FILE:titan>
          ${TITAN_SHARED})
# Two writers of one file at once: the second refuses while the first's temporary is locked.
add_test(NAME atomic_writers
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/scripts/atomic_writers.sh $<TARGET_FILE:titan>)
set_tests_properties(atomic_writers PROPERTIES SKIP_RETURN_CODE 77)
add_test(NAME run_lock
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/scripts/run_lock.sh $<TARGET_FILE:titan>)
# titan with stdout / stderr closed: the console goes nowhere, not into the run lock; status 0
add_test(NAME std_fds_closed
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/scripts/std_fds_closed.sh $<TARGET_FILE:titan>)
# a checkpoint folder or metadata.json titan cannot read: refused by name, not taken for none
add_test(NAME ckpt_unreadable
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/scripts/ckpt_unreadable.sh $<TARGET_FILE:titan>)
set_tests_properties(ckpt_unreadable PROPERTIES SKIP_RETURN_CODE 77)
set_tests_properties(checkpoint_symlinks atomic_links atomic_writers run_lock std_fds_closed ckpt_unreadable PROPERTIES
  ENVIRONMENT "OMP_NUM_THREADS=2" TIMEOUT 300)
