# Engine tests: stage equivalence, API misuse, loss scaling, clipping, comm volume, memory,
# failure propagation, and the `zinc estimate` figures against the ZeRO paper.
set(ZINC_ENGINE_TEST_DIR ${CMAKE_CURRENT_LIST_DIR})
add_library(zinc_toy STATIC ${ZINC_ENGINE_TEST_DIR}/toy.c)
target_link_libraries(zinc_toy PUBLIC zinc_testutil zinc_core)
target_include_directories(zinc_toy PUBLIC ${ZINC_ENGINE_TEST_DIR})

zinc_test(NAME engine_stages SOURCES ${ZINC_ENGINE_TEST_DIR}/test_stages.c
          LIBS zinc_toy LABELS "multirank;unit" TIMEOUT 600)
zinc_test(NAME engine_api SOURCES ${ZINC_ENGINE_TEST_DIR}/test_engine.c
          LIBS zinc_toy LABELS "multirank;unit" TIMEOUT 300)
zinc_test(NAME engine_estimate SOURCES ${ZINC_ENGINE_TEST_DIR}/test_estimate.c
          LABELS unit TIMEOUT 60)
add_dependencies(engine_estimate zinc_cli)
target_compile_definitions(engine_estimate PRIVATE ZINC_CLI="$<TARGET_FILE:zinc_cli>")
