# Checkpoint tests (ckpt/). The format and fault tests use the checkpoint layers directly with
# synthetic tensors (tests/ckpt/fixture.c) and the local comm backend; the engine tests go through
# the public API. Each runs in a second or two.
set(ZINC_CKPT_FIXTURE ${CMAKE_CURRENT_LIST_DIR}/fixture.c)
zinc_test(NAME ckpt_format SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_ckpt_format.c ${ZINC_CKPT_FIXTURE}
          LABELS ckpt TIMEOUT 60)
zinc_test(NAME ckpt_fault SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_ckpt_fault.c ${ZINC_CKPT_FIXTURE}
          LABELS "ckpt;fault" TIMEOUT 120)
# Damaged and hostile checkpoints refused by open/verify (engine_state ranges, FIFOs, header
# version, declared chunk sizes).
zinc_test(NAME ckpt_hostile SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_ckpt_hostile.c ${ZINC_CKPT_FIXTURE}
          LABELS "ckpt;fault" TIMEOUT 120)
# Through the public API with the toy model of tests/engine (target zinc_toy).
zinc_test(NAME ckpt_engine SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_ckpt_engine.c
          LIBS zinc_toy LABELS "ckpt;multirank" TIMEOUT 120)
# A load that fails part-way (a damaged Adam stream, no tag to fall back to) leaves the engine
# refusing steps and saves until a load succeeds; a blob too large fails before anything applies.
zinc_test(NAME ckpt_partial SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_ckpt_partial.c
          ${ZINC_CKPT_FIXTURE} LIBS zinc_toy LABELS "ckpt;fault" TIMEOUT 120)
# The `zinc ckpt` commands, run as a user runs them.
zinc_test(NAME ckpt_cli SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_ckpt_cli.c ${ZINC_CKPT_FIXTURE}
          LABELS ckpt TIMEOUT 60)
add_dependencies(ckpt_cli zinc_cli)
target_compile_definitions(ckpt_cli PRIVATE ZINC_CLI="$<TARGET_FILE:zinc_cli>")

if(ZINC_HAVE_MPI)
  zinc_mpi_test(NAME ckpt_mpi SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_ckpt_mpi.c ${ZINC_CKPT_FIXTURE}
                LIBS MPI::MPI_C NP 3 LABELS "ckpt;multirank" TIMEOUT 120)
endif()

# The same through the staging comm (device-memory collectives, as ranks sharing one GPU use):
# checkpoint bookkeeping collectives on host buffers must stage themselves.
add_test(NAME ckpt_engine_staged COMMAND ckpt_engine)
set_tests_properties(ckpt_engine_staged PROPERTIES LABELS "ckpt;multirank" TIMEOUT 300
                     ENVIRONMENT "ZINC_TEST_STAGED_COMM=1")

# A failed save (aborted world, a rank's write failing; synchronous and async) leaves no
# <tag>.tmp behind (issue 12).
zinc_test(NAME ckpt_tmp SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_ckpt_tmp.c ${ZINC_CKPT_FIXTURE}
          LABELS "ckpt;fault" TIMEOUT 120)

# Checkpoint retention through `zinc train --keep-last` (zinc.ckpt_keep_last): the run's older
# tags go, another config's tags and users' files stay, bad values exit 2.
add_test(NAME ckpt_keep_last COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/keep_last_test.sh
         $<TARGET_FILE:zinc_cli>)
set_tests_properties(ckpt_keep_last PROPERTIES LABELS ckpt TIMEOUT 120)
