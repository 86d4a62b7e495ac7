# The command line: every subcommand answers --help, titan --version, all flavors listed.
add_test(NAME cli_help
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/scripts/cli_help.sh $<TARGET_FILE:titan>)
set_tests_properties(cli_help PROPERTIES TIMEOUT 120)
