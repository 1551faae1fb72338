# Runs COMMAND and fails unless it exits with EXIT_CODE and prints (stdout and stderr together)
# something matching EXPECT. ctest's PASS_REGULAR_EXPRESSION alone would ignore the exit code.
#
#   cmake -DCOMMAND="exe;arg;..." -DEXIT_CODE=0 -DEXPECT=regex [-DMODEL=file -DMODELS_DIR=dir] -P expect_run.cmake
#
# MODEL: a file in $OPARA_MODELS (default MODELS_DIR), given to the command where it says {model},
# else as its first argument.
# When it has not been exported the script prints "opara-test-skip:", which the test's
# SKIP_REGULAR_EXPRESSION turns into a skip, as the GoogleTest suite skips such tests.

foreach(required COMMAND EXIT_CODE EXPECT)
  if(NOT DEFINED ${required})
    message(FATAL_ERROR "expect_run.cmake: -D${required}=... is required")
  endif()
endforeach()

if(DEFINED MODEL)
  set(models_dir "${MODELS_DIR}")
  if(DEFINED ENV{OPARA_MODELS})
    set(models_dir "$ENV{OPARA_MODELS}")
  endif()
  set(model_path "${models_dir}/${MODEL}")
  if(NOT EXISTS "${model_path}")
    message("opara-test-skip: ${model_path} is not exported: run scripts/export_models.py")
    return()
  endif()
  string(FIND "${COMMAND}" "{model}" placeholder)
  if(placeholder GREATER_EQUAL 0)
    string(REPLACE "{model}" "${model_path}" COMMAND "${COMMAND}")
  else()
    list(INSERT COMMAND 1 "${model_path}")
  endif()
endif()

list(JOIN COMMAND " " shown)
message("$ ${shown}")
execute_process(COMMAND ${COMMAND} RESULT_VARIABLE exit_code OUTPUT_VARIABLE output ERROR_VARIABLE output)
message("${output}")
if(NOT "${exit_code}" STREQUAL "${EXIT_CODE}")
  message(FATAL_ERROR "exit code ${exit_code}, expected ${EXIT_CODE}")
endif()
# CMake wraps the messages it prints (a package's reason for not being found): runs of blanks and
# newlines match as one space.
string(REGEX REPLACE "[ \t\r\n]+" " " output_one_line "${output}")
if(NOT output MATCHES "${EXPECT}" AND NOT output_one_line MATCHES "${EXPECT}")
  message(FATAL_ERROR "the output does not match: ${EXPECT}")
endif()
