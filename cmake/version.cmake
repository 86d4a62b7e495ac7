# Writes OUT (titan_version.h): TITAN_VERSION and TITAN_GIT_COMMIT (`git describe --always
# --dirty` of SRC, "unknown" outside git), for `titan --version`. Run at every build; the
# file is rewritten only when its text changes, so an unchanged commit recompiles nothing.
set(commit "unknown")
find_package(Git QUIET)
if(GIT_FOUND)
  execute_process(COMMAND ${GIT_EXECUTABLE} describe --always --dirty
    WORKING_DIRECTORY ${SRC} OUTPUT_VARIABLE out RESULT_VARIABLE rc
    OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(rc EQUAL 0 AND NOT out STREQUAL "")
    set(commit "${out}")
  endif()
endif()
set(text "#define TITAN_VERSION \"${VERSION}\"\n#define TITAN_GIT_COMMIT \"${commit}\"\n")
if(EXISTS ${OUT})
  file(READ ${OUT} old)
endif()
if(NOT old STREQUAL text)
  file(WRITE ${OUT} "${text}")
endif()
