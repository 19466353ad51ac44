# The folders' include graph points one way (README "Layout"): check_layers.sh fails on an
# include of a folder at the same layer or above (a cycle starts with one).
add_test(NAME layers COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/check_layers.sh ${CMAKE_SOURCE_DIR})
set_tests_properties(layers PROPERTIES LABELS unit TIMEOUT 60)
