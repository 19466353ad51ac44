# Comm layer tests (shard/comm*.c, shard/reduce.c). The mpi test runs under mpirun with 4 ranks
# and is registered only when the build has MPI.
zinc_test(NAME comm_reduce SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_reduce.c LABELS unit TIMEOUT 60)
# The same checks on the portable fp16 code, on machines whose CPU would pick F16C.
add_test(NAME comm_reduce_portable COMMAND comm_reduce)
set_tests_properties(comm_reduce_portable PROPERTIES LABELS unit TIMEOUT 60
                     ENVIRONMENT "ZINC_CPU_ISA=portable")
zinc_test(NAME comm_local SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_local.c LABELS unit TIMEOUT 60)

if(ZINC_HAVE_MPI)
  # The failure paths wait for timeouts of a few seconds; the whole run takes ~5 s. The TIMEOUT
  # keeps a hang from stalling CI.
  zinc_mpi_test(NAME comm_mpi SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_mpi.c LIBS MPI::MPI_C NP 4
                LABELS multirank TIMEOUT 120)
  # The application owns MPI (its own MPI_Init and MPI_Finalize): a rank's MPI_Finalize still
  # tells the others, whose comm creation and world broadcast would otherwise wait forever.
  zinc_mpi_test(NAME comm_mpi_app SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_mpi_app.c
                LIBS MPI::MPI_C NP 3 LABELS "multirank;fault" TIMEOUT 60)
endif()
