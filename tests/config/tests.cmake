# Config tests (config/config*.c): the table-driven corpus (cases.txt over corpus/*.json), the
# resolved values against DeepSpeed's defaults and batch rule, a mutation fuzzer over the corpus,
# and `zinc config check`'s exit codes.
set(ZINC_CONFIG_TEST_DIR ${CMAKE_CURRENT_LIST_DIR})
zinc_test(NAME config_corpus SOURCES ${ZINC_CONFIG_TEST_DIR}/test_config_corpus.c
          LABELS "config;unit" TIMEOUT 60)
zinc_test(NAME config_values SOURCES ${ZINC_CONFIG_TEST_DIR}/test_config_values.c
          LABELS "config;unit" TIMEOUT 60)
zinc_test(NAME config_fuzz SOURCES ${ZINC_CONFIG_TEST_DIR}/test_config_fuzz.c
          LABELS "config;unit" TIMEOUT 120)
add_test(NAME config_cli
         COMMAND sh ${ZINC_CONFIG_TEST_DIR}/cli_test.sh $<TARGET_FILE:zinc_cli> ${ZINC_CONFIG_TEST_DIR}/corpus)
set_tests_properties(config_cli PROPERTIES LABELS "config;unit" TIMEOUT 60)
