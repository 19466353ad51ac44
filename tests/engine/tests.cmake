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

if(ZINC_HAVE_MPI)
  add_executable(engine_stages_mpi ${ZINC_ENGINE_TEST_DIR}/test_stages_mpi.c)
  target_link_libraries(engine_stages_mpi PRIVATE zinc_toy zinc_testutil zinc_core)
  target_compile_options(engine_stages_mpi PRIVATE ${ZINC_WARNINGS})
  add_test(NAME engine_stages_mpi
           COMMAND ${MPIEXEC_EXECUTABLE} --allow-run-as-root --oversubscribe
                   ${MPIEXEC_NUMPROC_FLAG} 4 ${MPIEXEC_PREFLAGS}
                   $<TARGET_FILE:engine_stages_mpi> ${MPIEXEC_POSTFLAGS})
  set_tests_properties(engine_stages_mpi PROPERTIES LABELS multirank TIMEOUT 300
                       ENVIRONMENT "OMPI_MCA_btl_vader_single_copy_mechanism=none")
endif()

# The same equivalence through the staging comm that local ranks sharing one GPU use.
add_test(NAME engine_stages_staged COMMAND engine_stages)
set_tests_properties(engine_stages_staged PROPERTIES LABELS "multirank;unit" TIMEOUT 600
                     ENVIRONMENT "ZINC_TEST_STAGED_COMM=1")

# DeepSpeed 0.19.8 parity of the engine (issue 11): the stop at the minimum loss scale, configs
# that differ across ranks, and the API gaps found beside them.
zinc_test(NAME engine_parity SOURCES ${ZINC_ENGINE_TEST_DIR}/test_parity.c
          LIBS zinc_toy LABELS "multirank;unit" TIMEOUT 120)

# ZeRO-Offload of the optimizer state (issue 14): bitwise equal to the device run, copy volume,
# the device memory limit, checkpoints across offload settings.
zinc_test(NAME engine_offload SOURCES ${ZINC_ENGINE_TEST_DIR}/test_offload.c
          LIBS zinc_toy LABELS "multirank;unit;ckpt" TIMEOUT 300)
