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
# Stage 3's gather area: groups packed into the slots, prefetch within stage3_prefetch_bucket_size.
zinc_test(NAME engine_gather_pack SOURCES ${ZINC_ENGINE_TEST_DIR}/test_gather_pack.c
          LABELS "unit" TIMEOUT 120)
# A frozen engine (zinc_engine_frozen): stage 3 holding values only — no gradient, master, Adam
# state or buckets; values rounded into the shard as a trained engine's, gathered alike (the
# persistent group, a prefetched copy dropped by zinc_param_set); the training calls refused.
zinc_test(NAME engine_frozen SOURCES ${ZINC_ENGINE_TEST_DIR}/test_frozen.c
          LABELS "multirank;unit" TIMEOUT 120)
# zinc_memory_hold: views of the engine's memory (the Python front-end's tensors) keep it past
# zinc_engine_destroy; the last release, from any thread or a DLPack deleter, frees it.
zinc_test(NAME engine_memory_hold SOURCES ${ZINC_ENGINE_TEST_DIR}/test_memory_hold.c
          LABELS "unit" TIMEOUT 120)
# zinc_states_offload / zinc_states_reload (DeepSpeed's offload_states): the optimizer state in
# host memory between steps, bit for bit the same training after it comes back.
zinc_test(NAME engine_states_away SOURCES ${ZINC_ENGINE_TEST_DIR}/test_states_away.c
          LIBS zinc_toy LABELS "multirank;unit" TIMEOUT 300)
zinc_test(NAME engine_grad_access SOURCES ${ZINC_ENGINE_TEST_DIR}/test_grad_access.c
          LABELS "multirank;unit" TIMEOUT 120)
# data_types.grad_accum_dtype "fp32" with bf16/fp16 at stages 2-3, with and without offload:
# gradients and weights against a scalar reference of DeepSpeed's arithmetic (16-bit reduction,
# fp32 sums).
zinc_test(NAME engine_grad_accum_fp32 SOURCES ${ZINC_ENGINE_TEST_DIR}/test_grad_accum_fp32.c
          LABELS "multirank;unit" TIMEOUT 120)
# Its offload rows with the host side of the cpu device's copies as late as a GPU may do it.
add_test(NAME engine_grad_accum_fp32_late COMMAND engine_grad_accum_fp32)
set_tests_properties(engine_grad_accum_fp32_late PROPERTIES LABELS "multirank;unit" TIMEOUT 120
                     ENVIRONMENT "ZINC_CPU_ASYNC_COPY=late")
# The gradient buffer lent by the caller per window (the Python front-end lends torch's memory).
zinc_test(NAME engine_grad_buffer SOURCES ${ZINC_ENGINE_TEST_DIR}/test_grad_buffer.c
          LIBS zinc_toy LABELS "multirank;unit" TIMEOUT 300)
# fp16 on a step where the loss scale grows: unscaled and clipped with the new scale, as
# DeepSpeed 0.19.8 does (stages 0-3, offload).
zinc_test(NAME engine_scale_growth SOURCES ${ZINC_ENGINE_TEST_DIR}/test_scale_growth.c
          LABELS "unit" TIMEOUT 120)
# With the cpu device's asynchronous copies done when queued: offload's download of a gradient
# queued before zinc_param_grad_set changed it must be queued again (the deferred default copies
# late enough to hide a missing one).
add_test(NAME engine_grad_access_eager COMMAND engine_grad_access)
set_tests_properties(engine_grad_access_eager PROPERTIES LABELS "multirank;unit" TIMEOUT 120
                     ENVIRONMENT "ZINC_CPU_ASYNC_COPY=eager")
# And with the host side of each copy done as late as a GPU may (ZINC_CPU_ASYNC_COPY=late,
# kernels/cpu/cpu_device.c): an accessor that reads the host gradient before the copy_wait covering
# its download sees the old bytes, and a host write of what a copy may still read or write (the
# master after a step, through zinc_param_local_set) aborts, naming the copy.
add_test(NAME engine_grad_access_late COMMAND engine_grad_access)
set_tests_properties(engine_grad_access_late PROPERTIES LABELS "multirank;unit" TIMEOUT 120
                     ENVIRONMENT "ZINC_CPU_ASYNC_COPY=late")
zinc_test(NAME engine_estimate SOURCES ${ZINC_ENGINE_TEST_DIR}/test_estimate.c
          LABELS unit TIMEOUT 60)
add_dependencies(engine_estimate zinc_cli)
target_compile_definitions(engine_estimate PRIVATE ZINC_CLI="$<TARGET_FILE:zinc_cli>")

if(ZINC_HAVE_MPI)
  zinc_mpi_test(NAME engine_stages_mpi SOURCES ${ZINC_ENGINE_TEST_DIR}/test_stages_mpi.c
                LIBS zinc_toy NP 4 LABELS multirank TIMEOUT 300)
endif()

# The staging comm over the mpi backend (CUDA ranks sharing one GPU under mpirun use it), on the
# cpu device through ZINC_TEST_STAGED_COMM=1: the same training as the plain mpi comm, bit for
# bit, at stages 0-3 (the test sets the hook itself, run by run).
if(ZINC_HAVE_MPI)
  zinc_mpi_test(NAME engine_staged_mpi SOURCES ${ZINC_ENGINE_TEST_DIR}/test_staged_mpi.c
                LIBS zinc_toy NP 2 LABELS multirank TIMEOUT 300)
endif()

# The same equivalence through the staging comm that local ranks sharing one GPU use.
add_test(NAME engine_stages_staged COMMAND engine_stages)
set_tests_properties(engine_stages_staged PROPERTIES LABELS "multirank;unit" TIMEOUT 600
                     ENVIRONMENT "ZINC_TEST_STAGED_COMM=1")

# DeepSpeed 0.19.8 parity of the engine (issue 11): the stop at the minimum loss scale, configs
# that differ across ranks, and the API gaps found beside them.
zinc_test(NAME engine_parity SOURCES ${ZINC_ENGINE_TEST_DIR}/test_parity.c
          LIBS zinc_toy LABELS "multirank;unit" TIMEOUT 120)

# A caller-owned accumulation boundary (DeepSpeed's set_gradient_accumulation_boundary and
# managed_gradient_accumulation false): bitwise the count's training where it ends the window
# where the count would, one optimizer step per window otherwise, and the refusals.
zinc_test(NAME engine_accum_boundary SOURCES ${ZINC_ENGINE_TEST_DIR}/test_accum_boundary.c
          LIBS zinc_toy LABELS "multirank;unit" TIMEOUT 300)
# Again with the cpu device's copies done when queued, as a GPU's copy engine does them: a
# download offload started before the boundary moved on is then visibly stale.
add_test(NAME engine_accum_boundary_eager COMMAND engine_accum_boundary)
set_tests_properties(engine_accum_boundary_eager PROPERTIES LABELS "multirank;unit" TIMEOUT 300
                     ENVIRONMENT "ZINC_CPU_ASYNC_COPY=eager")
add_test(NAME engine_accum_boundary_late COMMAND engine_accum_boundary)
set_tests_properties(engine_accum_boundary_late PROPERTIES LABELS "multirank;unit" TIMEOUT 300
                     ENVIRONMENT "ZINC_CPU_ASYNC_COPY=late")

# Counters near 2^63 (issue 12). engine/step.c and optim/*.c are compiled into the test itself
# with -fsanitize=signed-integer-overflow -fno-sanitize-recover (they take precedence over the
# same objects of zinc_core at link time), so a signed overflow there fails the test.
include(CheckCSourceCompiles)
set(CMAKE_REQUIRED_FLAGS "-fsanitize=signed-integer-overflow -fno-sanitize-recover")
set(CMAKE_REQUIRED_LINK_OPTIONS "-fsanitize=signed-integer-overflow")
check_c_source_compiles("int main(void) { return 0; }" ZINC_HAVE_SIO_SANITIZER)
unset(CMAKE_REQUIRED_FLAGS)
unset(CMAKE_REQUIRED_LINK_OPTIONS)
zinc_test(NAME engine_counters
          SOURCES ${ZINC_ENGINE_TEST_DIR}/test_counters.c ${CMAKE_SOURCE_DIR}/engine/step.c
                  ${CMAKE_SOURCE_DIR}/optim/scaler.c ${CMAKE_SOURCE_DIR}/optim/sched.c
                  ${CMAKE_SOURCE_DIR}/optim/adam.c ${CMAKE_SOURCE_DIR}/optim/clip.c
          LIBS zinc_toy LABELS unit TIMEOUT 60)
if(ZINC_HAVE_SIO_SANITIZER)
  target_compile_options(engine_counters PRIVATE -fsanitize=signed-integer-overflow
                         -fno-sanitize-recover)
  target_link_options(engine_counters PRIVATE -fsanitize=signed-integer-overflow)
endif()

# A usage error inside the collective sequence aborts the world (issue 12): the other ranks
# return ZINC_ERR_ABORTED at once, not after comm_timeout_s (60 s here).
zinc_test(NAME engine_usage_abort SOURCES ${ZINC_ENGINE_TEST_DIR}/test_usage_abort.c
          LIBS zinc_toy LABELS "multirank;unit" TIMEOUT 120)

# A rank stopped with SIGSTOP (issue 12): the others time out, and mpirun must exit non-zero in
# bounded time — zinc_world_destroy ends the job with MPI_Abort instead of MPI_Finalize. Skipped
# (77) only when every rank process is gone but mpirun itself hangs (stopped_rank.sh says why).
if(ZINC_HAVE_MPI)
  add_executable(engine_stopped_rank_mpi ${ZINC_ENGINE_TEST_DIR}/test_stopped_rank_mpi.c)
  target_link_libraries(engine_stopped_rank_mpi PRIVATE zinc_toy zinc_testutil zinc_core
                                                        MPI::MPI_C)
  target_compile_options(engine_stopped_rank_mpi PRIVATE ${ZINC_WARNINGS})
  add_test(NAME engine_stopped_rank_mpi
           COMMAND sh ${ZINC_ENGINE_TEST_DIR}/stopped_rank.sh ${MPIEXEC_EXECUTABLE}
                   $<TARGET_FILE:engine_stopped_rank_mpi>)
  # The same with the program owning MPI: its own MPI_Finalize must end the job alike.
  add_test(NAME engine_stopped_rank_app_mpi
           COMMAND sh ${ZINC_ENGINE_TEST_DIR}/stopped_rank.sh ${MPIEXEC_EXECUTABLE}
                   $<TARGET_FILE:engine_stopped_rank_mpi> app)
  set_tests_properties(engine_stopped_rank_mpi engine_stopped_rank_app_mpi PROPERTIES
                       LABELS "multirank;fault" TIMEOUT 60 SKIP_RETURN_CODE 77
                       ENVIRONMENT "OMPI_MCA_btl_vader_single_copy_mechanism=none")
endif()

# zinc_world_abort with two engines per process on an MPI world: the notice reaches the ranks
# blocked in either engine's comm, also after the later engine is gone.
if(ZINC_HAVE_MPI)
  zinc_mpi_test(NAME engine_abort_mpi SOURCES ${ZINC_ENGINE_TEST_DIR}/test_abort_mpi.c
                LIBS zinc_toy NP 2 LABELS "multirank;fault" TIMEOUT 120)
endif()

# ZeRO-Offload of the optimizer state (issue 14): bitwise equal to the device run, copy volume,
# the device memory limit, checkpoints across offload settings.
zinc_test(NAME engine_offload SOURCES ${ZINC_ENGINE_TEST_DIR}/test_offload.c
          LIBS zinc_toy LABELS "multirank;unit;ckpt" TIMEOUT 300)
# The same with the cpu device's asynchronous copies done when queued instead of at the wait (a
# real device copies somewhere between): a copy queued before its source is final shows here.
add_test(NAME engine_offload_eager COMMAND engine_offload)
set_tests_properties(engine_offload_eager PROPERTIES LABELS "multirank;unit" TIMEOUT 300
                     ENVIRONMENT "ZINC_CPU_ASYNC_COPY=eager")
# And late: the join does only the device side of each copy, a download reaches host memory at the
# copy_wait covering it, and a host change of a copy's host buffer before that wait aborts (a
# missing zoffload_grad_settle fails here and nowhere else).
add_test(NAME engine_offload_late COMMAND engine_offload)
set_tests_properties(engine_offload_late PROPERTIES LABELS "multirank;unit" TIMEOUT 300
                     ENVIRONMENT "ZINC_CPU_ASYNC_COPY=late")

# A weight decay, learning rate, betas and eps per group (zinc_group_set_weight_decay,
# zinc_group_set_lr, zinc_group_set_betas, zinc_group_set_eps; torch's per-parameter-group
# values): every group bitwise as the run whose config values are its own, at stages 0-3,
# offloaded too; OneCycle's cycled betas replace the groups' own; ranks that differ refused.
zinc_test(NAME engine_group_hparams SOURCES ${ZINC_ENGINE_TEST_DIR}/test_group_hparams.c
          LIBS zinc_toy LABELS "multirank;unit" TIMEOUT 300)

# zinc bench offload (issue 14's benchmark): argument errors and the shape of its rows.
add_test(NAME bench_offload_cli COMMAND sh ${ZINC_ENGINE_TEST_DIR}/bench_offload.sh $<TARGET_FILE:zinc_cli>)
set_tests_properties(bench_offload_cli PROPERTIES LABELS unit TIMEOUT 120)

# zinc.host_memory_limit (issue 39 item 3): a plan whose host bytes exceed it fails zinc_finalize
# on every rank, naming the category, before allocating; one that fits trains bit for bit as
# without the limit (offload_optimizer at stages 1-3, no offload, offload_param at stage 3).
zinc_test(NAME engine_host_limit SOURCES ${ZINC_ENGINE_TEST_DIR}/test_host_limit.c
          LIBS zinc_toy LABELS "multirank;unit" TIMEOUT 300)

# ZeRO-Offload of the 16-bit parameters (issue 14, offload_param at stage 3): bitwise equal to
# the device run, the memory split against `zinc estimate`, the device memory limit, the copy
# volume, checkpoints across offload_param settings and world sizes.
zinc_test(NAME engine_offload_param SOURCES ${ZINC_ENGINE_TEST_DIR}/test_offload_param.c
          LIBS zinc_toy LABELS "multirank;unit;ckpt" TIMEOUT 600)
add_dependencies(engine_offload_param zinc_cli)
target_compile_definitions(engine_offload_param PRIVATE ZINC_CLI="$<TARGET_FILE:zinc_cli>")
# The same through the staging comm that local ranks sharing one GPU use (the uploads land in
# the gather slot the staged all-gather then reads).
add_test(NAME engine_offload_param_staged COMMAND engine_offload_param)
set_tests_properties(engine_offload_param_staged PROPERTIES LABELS "multirank;unit" TIMEOUT 600
                     ENVIRONMENT "ZINC_TEST_STAGED_COMM=1")
# And with the cpu device's asynchronous copies done when queued (as engine_offload_eager).
add_test(NAME engine_offload_param_eager COMMAND engine_offload_param)
set_tests_properties(engine_offload_param_eager PROPERTIES LABELS "multirank;unit" TIMEOUT 600
                     ENVIRONMENT "ZINC_CPU_ASYNC_COPY=eager")
# And late (as engine_offload_late).
add_test(NAME engine_offload_param_late COMMAND engine_offload_param)
set_tests_properties(engine_offload_param_late PROPERTIES LABELS "multirank;unit" TIMEOUT 600
                     ENVIRONMENT "ZINC_CPU_ASYNC_COPY=late")

# The offload comparisons on the mpi backend (one process per rank), stages 1-3.
if(ZINC_HAVE_MPI)
  zinc_mpi_test(NAME engine_offload_mpi SOURCES ${ZINC_ENGINE_TEST_DIR}/test_offload_mpi.c
                LIBS zinc_toy NP 2 LABELS multirank TIMEOUT 300)
endif()
# The NVMe offload's scratch file (engine/nvme_store.c, issue 39): io_uring where built, and the
# pread/pwrite backend.
zinc_test(NAME engine_nvme_store SOURCES ${ZINC_ENGINE_TEST_DIR}/test_nvme_store.c
          LABELS "unit" TIMEOUT 120)
add_test(NAME engine_nvme_store_pread COMMAND engine_nvme_store)
set_tests_properties(engine_nvme_store_pread PROPERTIES LABELS unit TIMEOUT 120
                     ENVIRONMENT ZINC_NVME_BACKEND=pread)
add_test(NAME engine_nvme_store_deferred COMMAND engine_nvme_store)
set_tests_properties(engine_nvme_store_deferred PROPERTIES LABELS unit TIMEOUT 120
                     ENVIRONMENT ZINC_NVME_BACKEND=deferred)
# io_uring's short completions, an odd count each (ZINC_NVME_SHORT): the rest was moved through
# the O_DIRECT descriptor at an unaligned offset, EINVAL (found by a review, 2026-11-30).
add_test(NAME engine_nvme_store_short COMMAND engine_nvme_store)
set_tests_properties(engine_nvme_store_short PROPERTIES LABELS unit TIMEOUT 120
                     ENVIRONMENT ZINC_NVME_SHORT=1 SKIP_RETURN_CODE 77)
# NVMe offload of the optimizer state (issue 39): bitwise equal to the device run, I/O volume,
# the host cap it meets where cpu offload cannot, checkpoints across offload settings, I/O
# errors. Again with every read and write deferred to its wait (a missing wait in the pipeline
# gives other weights), and with the cpu device's copies done when queued and plain pread/pwrite.
zinc_test(NAME engine_offload_nvme SOURCES ${ZINC_ENGINE_TEST_DIR}/test_offload_nvme.c
          LIBS zinc_toy LABELS "multirank;unit;ckpt" TIMEOUT 600)
add_test(NAME engine_offload_nvme_deferred COMMAND engine_offload_nvme)
set_tests_properties(engine_offload_nvme_deferred PROPERTIES LABELS "multirank;unit" TIMEOUT 600
                     ENVIRONMENT "ZINC_NVME_BACKEND=deferred")
add_test(NAME engine_offload_nvme_eager COMMAND engine_offload_nvme)
set_tests_properties(engine_offload_nvme_eager PROPERTIES LABELS "multirank;unit" TIMEOUT 600
                     ENVIRONMENT "ZINC_NVME_BACKEND=pread;ZINC_CPU_ASYNC_COPY=eager")
# And late (as engine_offload_late), with every read and write deferred to its wait as well.
add_test(NAME engine_offload_nvme_late COMMAND engine_offload_nvme)
set_tests_properties(engine_offload_nvme_late PROPERTIES LABELS "multirank;unit" TIMEOUT 600
                     ENVIRONMENT "ZINC_NVME_BACKEND=deferred;ZINC_CPU_ASYNC_COPY=late")
