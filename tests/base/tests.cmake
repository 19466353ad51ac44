# The bottom layer (base/): the strict JSON check every parser runs.
zinc_test(NAME json_strict SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_json_strict.c LABELS unit TIMEOUT 60)
# ZINC_LOG: levels, per-subsystem rules, "off".
zinc_test(NAME log_levels SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_log.c LABELS unit TIMEOUT 60)
