# `zinc plan` (issue 41): the model (tools/plan_model.c, compiled in with the estimate code it
# shares) against hand-computed numbers, its bytes against the engine's counters, its memory
# against `zinc estimate`, monotonicity; and the CLI's refusals (exit 2, the flag named).
set(ZINC_PLAN_TEST_DIR ${CMAKE_CURRENT_LIST_DIR})
zinc_test(NAME plan_model
          SOURCES ${ZINC_PLAN_TEST_DIR}/test_plan.c ${CMAKE_SOURCE_DIR}/tools/plan_model.c
                  ${CMAKE_SOURCE_DIR}/tools/plan_recommend.c ${CMAKE_SOURCE_DIR}/tools/plan_hf.c
                  ${CMAKE_SOURCE_DIR}/tools/plan_calibrate.c ${CMAKE_SOURCE_DIR}/tools/cmd_bench.c
                  ${CMAKE_SOURCE_DIR}/tools/bench_offload.c
                  ${CMAKE_SOURCE_DIR}/tools/cmd_estimate.c ${CMAKE_SOURCE_DIR}/tools/args.c
          LIBS zinc_models m LABELS "multirank;unit" TIMEOUT 300)
add_dependencies(plan_model zinc_cli)
target_compile_definitions(plan_model PRIVATE ZINC_CLI="$<TARGET_FILE:zinc_cli>"
                           ZINC_PLAN_TEST_DIR="${ZINC_PLAN_TEST_DIR}")
add_test(NAME plan_cli COMMAND sh ${ZINC_PLAN_TEST_DIR}/cli_test.sh $<TARGET_FILE:zinc_cli>)
set_tests_properties(plan_cli PROPERTIES LABELS unit TIMEOUT 60)
# The CLI's shared argument helpers (tools/args.c): plain-decimal numbers, option values that
# are not options; and the commands that use them, end to end.
zinc_test(NAME cli_args SOURCES ${ZINC_PLAN_TEST_DIR}/test_args.c ${CMAKE_SOURCE_DIR}/tools/args.c
          LABELS unit TIMEOUT 60)
add_test(NAME cli_values COMMAND sh ${ZINC_PLAN_TEST_DIR}/values_test.sh $<TARGET_FILE:zinc_cli>)
set_tests_properties(cli_values PROPERTIES LABELS unit TIMEOUT 120)
# --help anywhere on the line: every command's own help, exit 0, before other options are checked.
add_test(NAME cli_help COMMAND sh ${ZINC_PLAN_TEST_DIR}/help_test.sh $<TARGET_FILE:zinc_cli>)
set_tests_properties(cli_help PROPERTIES LABELS unit TIMEOUT 60)
