# Install test (label `install`): installs into a temporary prefix, checks the files, SONAME and
# exported symbols, and builds and runs examples/c_minimal against it with find_package(zinc),
# pkg-config and libzinc.a. Needs the whole build (it installs what `cmake --build` produced).
add_test(NAME install_example
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/install_test.sh ${CMAKE_BINARY_DIR} ${CMAKE_SOURCE_DIR}
                 ${PROJECT_VERSION} ${CMAKE_INSTALL_LIBDIR} ${CMAKE_C_COMPILER} "${ZINC_SANITIZE}")
set_tests_properties(install_example PROPERTIES LABELS install TIMEOUT 180)
