# GPU tests (label gpu: each kernel against its CPU reference, NCCL at world size 1; they print
# "SKIP: no CUDA device (...)" and exit 77 without a GPU) and the parts of the CUDA backend that
# run anywhere (label unit).
set(_gpu ${CMAKE_CURRENT_LIST_DIR})

# The NCCL-id bootstrap is plain C, in zinc_core in every build (zinc_world_create_launched reads
# the launcher's environment with it), and testable without a GPU.
zinc_test(NAME cuda_bootstrap SOURCES ${_gpu}/test_bootstrap.c LABELS unit TIMEOUT 60)

# The CUDA Adam kernel's element arithmetic, run on the host against the CPU definition. No CUDA
# needed; without contraction the host operators are the device's separately rounded operations.
zinc_test(NAME cuda_elem SOURCES ${_gpu}/test_cuda_elem.c LABELS unit TIMEOUT 60)
target_compile_options(cuda_elem PRIVATE -ffp-contract=off)

if(ZINC_HAVE_CUDA)
  zinc_test(NAME cuda_nodevice SOURCES ${_gpu}/test_cuda_nodevice.c LABELS unit TIMEOUT 60)
  zinc_test(NAME cuda_kernels SOURCES ${_gpu}/test_cuda_kernels.c LABELS gpu TIMEOUT 300)
  zinc_test(NAME cuda_nccl SOURCES ${_gpu}/test_nccl.c LABELS gpu TIMEOUT 120)
  # Another stream waits for one stage-3 group's gather, not for zinc's whole stream.
  zinc_test(NAME cuda_gather_wait SOURCES ${_gpu}/test_gather_wait.c LIBS zinc_toy LABELS gpu
            TIMEOUT 60)
  # Both again with a world of one calling NCCL (ZINC_NCCL_SOLO=0): without it a one-GPU machine
  # never runs the collectives on the comm stream with the events each way that larger worlds
  # take (the marks recorded after the compute stream's wait for an all-gather among them).
  foreach(_t cuda_nccl cuda_gather_wait)
    add_test(NAME ${_t}_nccl_path COMMAND ${_t})
    set_tests_properties(${_t}_nccl_path PROPERTIES LABELS gpu TIMEOUT 120 SKIP_RETURN_CODE 77
                         ENVIRONMENT "ZINC_NCCL_SOLO=0")
  endforeach()
endif()

# A CUDA engine under mpirun -np 2 (engine/gpu_share.c): ranks sharing a GPU get the staged comm
# over MPI, a GPU each NCCL; a bad ZINC_SHARE_DEVICE or no GPU fails every rank at once. It runs
# anywhere with MPI (without a GPU, the failures), hence multirank as well as gpu.
if(ZINC_HAVE_MPI)
  zinc_mpi_test(NAME cuda_share_mpi SOURCES ${_gpu}/test_share_mpi.c LIBS zinc_toy NP 2
                LABELS "multirank;gpu" TIMEOUT 120)
endif()

# The built-in model's CUDA version (models/cuda/): loss and every gradient against the CPU model
# (gpu), and `zinc train --device cuda`: a 2-rank ZeRO-3 run next to the CPU's (gpu), a clean
# failure without a GPU or without CUDA (model; skipped where a GPU is present).
if(TARGET zinc_models)
  zinc_test(NAME train_cuda_nodevice SOURCES ${_gpu}/test_train_cuda.c LIBS zinc_models
            ARGS nodevice LABELS model TIMEOUT 60)
  add_dependencies(train_cuda_nodevice zinc_cli)
  target_compile_definitions(train_cuda_nodevice PRIVATE ZINC_CLI="$<TARGET_FILE:zinc_cli>")
  if(ZINC_HAVE_CUDA)
    zinc_test(NAME model_cuda SOURCES ${_gpu}/test_model_cuda.c LIBS zinc_models LABELS gpu
              TIMEOUT 120)
    zinc_test(NAME train_cuda SOURCES ${_gpu}/test_train_cuda.c LIBS zinc_models ARGS gpu
              LABELS gpu TIMEOUT 300)
    add_dependencies(train_cuda zinc_cli)
    target_compile_definitions(train_cuda PRIVATE ZINC_CLI="$<TARGET_FILE:zinc_cli>")
    # The GPU's loss curves against the CPU's at stages 0-3 (bf16, fp16), and resume across
    # devices (test_train_cuda.c states the bounds and where they come from).
    add_test(NAME train_cuda_curves COMMAND train_cuda curves)
    set_tests_properties(train_cuda_curves PROPERTIES LABELS gpu TIMEOUT 600 SKIP_RETURN_CODE 77)
  endif()
endif()
