# Kernel tests (kernels/): the CPU device against its scalar reference and against independent
# references (PyTorch's Adam/AdamW in double, _Float16, long double sums). See docs/kernels.md.
set(ZK_TESTS ${CMAKE_CURRENT_LIST_DIR})
zinc_test(NAME kernels_bitwise SOURCES ${ZK_TESTS}/test_bitwise.c LABELS unit TIMEOUT 120)
zinc_test(NAME kernels_adam_torch SOURCES ${ZK_TESTS}/test_adam_torch.c LABELS unit TIMEOUT 60)
zinc_test(NAME kernels_convert SOURCES ${ZK_TESTS}/test_convert.c LABELS unit TIMEOUT 60)
zinc_test(NAME kernels_grad_stats SOURCES ${ZK_TESTS}/test_grad_stats.c LABELS unit TIMEOUT 60)
zinc_test(NAME kernels_device SOURCES ${ZK_TESTS}/test_device.c LABELS unit TIMEOUT 60)
# The cpu device's asynchronous copies in each ZINC_CPU_ASYNC_COPY mode, and the races the late
# mode aborts on.
zinc_test(NAME kernels_async_copy SOURCES ${ZK_TESTS}/test_async_copy.c LABELS unit TIMEOUT 60)
