# optim/: schedulers, loss scaler, Adam scalars and clipping — pure functions, all label unit.
zinc_test(NAME test_optim_sched SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_sched.c LABELS unit TIMEOUT 30)
zinc_test(NAME test_optim_scaler SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_scaler.c LABELS unit TIMEOUT 30)
zinc_test(NAME test_optim_adam_clip SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_adam_clip.c LABELS unit TIMEOUT 30)
zinc_test(NAME test_optim_sched_api SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_sched_api.c LABELS unit TIMEOUT 30)
